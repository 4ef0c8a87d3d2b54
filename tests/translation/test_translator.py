"""`keras_attn.translation.Translator`: a tiny encoder-decoder served three
ways (in-graph search, the SavedModel, the LiteRT file with the whole
greedy loop) gives one answer; unknown words are copied from the source;
empty and over-long inputs are handled. TensorFlow only (serving)."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn.translation import Translator
from keras_attn_runtime import LiteRTTranslator
from tests.tiny_models import (  # noqa: F401 (the names its tests use)
    SOURCE,
    TARGET,
    S,
    U,
    copying_model,
    copying_translator,
    tiny_model,
    tiny_translator,
    vectorizer,
)


@pytest.mark.slow
def test_searches_saved_model_and_litert_agree(tmp_path):
    translator = tiny_translator(tiny_model())
    texts = ["a b c", "d .", "c c a b", "a"]
    greedy = translator.translate_greedy(tf.constant(texts))
    beam = translator.translate(tf.constant(texts))
    assert tuple(beam["attention"].shape)[::2] == (4, S)
    assert greedy["source_tokens"].numpy()[0][:3].tolist() == [b"a", b"b", b"c"]
    words = [t.decode() for t in greedy["translation"].numpy()]
    assert all("[end]" not in w and "[start]" not in w for w in words)

    translator.export(str(tmp_path / "sm"))
    loaded = tf.saved_model.load(str(tmp_path / "sm"))
    assert {"serving_default", "translate", "translate_greedy"} <= set(
        loaded.signatures
    )
    again = loaded.signatures["translate_greedy"](tf.constant(texts))
    assert again["translation"].numpy().tolist() == (
        greedy["translation"].numpy().tolist()
    )
    beam_again = loaded.signatures["translate"](tf.constant(texts))
    assert beam_again["translation"].numpy().tolist() == (
        beam["translation"].numpy().tolist()
    )

    path = str(tmp_path / "m.tflite")
    translator.export_tflite(path)
    from keras_attn.export import tflite_op_names

    ops_used = tflite_op_names(path)
    assert "WHILE" in ops_used and not [o for o in ops_used if "FLEX" in o]
    lite = LiteRTTranslator(path)
    assert [lite.translate(t) for t in texts] == words


@pytest.mark.slow
def test_unknown_words_are_copied_from_the_attended_source(tmp_path):
    translator = copying_translator()
    # Row 1: every word is unknown, so the attended ones are copied. Row 2:
    # only "12" is unknown: both [UNK]s copy it, wherever attention is.
    # Row 3: nothing unknown, the attended known words are copied.
    texts = ["Tom has 12 cats", "a 12 c", "a b c", ""]
    want = ["12 Tom.", "12 12.", "c a.", ""]
    for fn in (translator.translate_greedy, translator.translate):
        out = fn(tf.constant(texts))["translation"].numpy().tolist()
        assert out == [w.encode() for w in want], fn
    path = str(tmp_path / "copy.tflite")
    translator.export_tflite(path)
    lite = LiteRTTranslator(path)
    assert [lite.translate(t) for t in texts] == want
    # Without a standardization there is nothing to copy: [UNK] is banned.
    encode, step_fn = copying_model()
    plain = Translator(vectorizer(), TARGET, encode, step_fn, max_length=6)
    assert TARGET.index("[UNK]") in plain.banned


def test_over_long_input_is_flagged_and_refused(tmp_path):
    translator = copying_translator()
    texts = ["a b c d a b", "a b c d a b c"]  # 6 and 7 words, S = 6
    out = translator.translate_greedy(tf.constant(texts))
    assert out["source_truncated"].numpy().tolist() == [False, True]
    path = str(tmp_path / "m.tflite")
    translator.export_tflite(path)
    lite = LiteRTTranslator(path)
    lite.translate(texts[0])
    with pytest.raises(ValueError, match="at most 6 words.*7 words"):
        lite.translate(texts[1])
    assert lite.translate(texts[1], truncate=True) == lite.translate(texts[0])


@pytest.mark.slow
def test_litert_translator_reads_the_sentence_own_length(tmp_path):
    # The file's source is (1, None): a 2-word sentence runs the encoder
    # and every attention on 2 positions, not on `source_length` padded
    # ones. Padding it to the full length must not change the output.
    translator = tiny_translator(tiny_model(), beam_width=3)
    path = str(tmp_path / "beam.tflite")
    translator.export_tflite(path, search_method="beam")
    lite = LiteRTTranslator(path)
    spec = lite.runner.get_input_details()["source"]
    assert spec["shape_signature"].tolist() == [1, -1]
    assert lite.dynamic and lite.source_ids(["a", "b"]).shape == (1, 2)
    texts = ["a b c", "d .", "c c a b", "a", "b b b"]
    own = [lite.translate(t) for t in texts]
    assert own == [
        t.decode()
        for t in translator.translate(tf.constant(texts))["translation"]
        .numpy()
        .tolist()
    ]
    lite.dynamic = False  # the zero-padded input of files before 0.3
    assert lite.source_ids(["a", "b"]).shape == (1, S)
    assert [lite.translate(t) for t in texts] == own
    padded = str(tmp_path / "padded.tflite")
    translator.export_tflite(padded, search_method="beam", pad_source=True)
    lite = LiteRTTranslator(padded)
    spec = lite.runner.get_input_details()["source"]
    assert spec["shape_signature"].tolist() == [1, S] and not lite.dynamic
    assert [lite.translate(t) for t in texts] == own
    with pytest.raises(ValueError, match="pad_source='yes'"):
        translator.export_tflite(padded, overwrite=True, pad_source="yes")
    # The first step in the WHILE with the others: the same translations.
    looped = str(tmp_path / "looped.tflite")
    translator.export_tflite(
        looped, search_method="beam", unroll_first_step=False
    )
    assert [LiteRTTranslator(looped).translate(t) for t in texts] == own
    with pytest.raises(ValueError, match="unroll_first_step=1"):
        translator.export_tflite(looped, overwrite=True, unroll_first_step=1)


@pytest.mark.slow
def test_save_takes_a_litert_file_exported_earlier(tmp_path):
    # The recipe's order: export LiteRT from float weights, then quantize
    # the Keras model for the SavedModel, then save the folder with it.
    parts = tiny_model()
    translator = tiny_translator(parts)
    early = str(tmp_path / "early.tflite")
    translator.export_tflite(early, search_method="beam")
    with pytest.raises(ValueError, match="litert_file=.*'beam'"):
        translator.save(
            str(tmp_path / "x"), litert_file=early, search_method="beam"
        )
    assert not os.path.exists(tmp_path / "x" / "saved_model")
    folder = translator.save(str(tmp_path / "tr"), litert_file=early)
    with open(early, "rb") as a, open(f"{folder}/model.tflite", "rb") as b:
        assert a.read() == b.read()
    assert sorted(os.listdir(folder)) == [
        "model.tflite",
        "saved_model",
        "source_vocabulary.txt",
        "target_vocabulary.txt",
    ]
    other = tiny_translator(parts, max_length=4)
    with pytest.raises(ValueError, match="written by this translator"):
        other.save(str(tmp_path / "y"), litert_file=early)
    assert not os.path.exists(tmp_path / "y" / "saved_model")
    # Keras's int8 after the translator was made (and its LiteRT file
    # exported), before it first translates: the new variables (the
    # scales) reach the SavedModel (export failed on an untracked one).
    parts = tiny_model()
    model = parts[0]
    translator = tiny_translator(parts, standardize=None)
    translator.export_tflite(early, overwrite=True)
    model.quantize("int8", filters=lambda layer: layer is not model)
    texts = ["a b c", "d .", "c c a b"]
    want = translator.translate(tf.constant(texts))["translation"].numpy()
    translator.save(str(tmp_path / "q"), litert_file=early)
    loaded = tf.saved_model.load(str(tmp_path / "q" / "saved_model"))
    got = loaded.signatures["translate"](tf.constant(texts))["translation"]
    assert got.numpy().tolist() == want.tolist()
    names = list(loaded.served_variables)  # Keras paths
    assert any("scale" in n for n in names), names


def test_translator_needs_start_and_end_tokens():
    encode, step_fn = copying_model()
    with pytest.raises(ValueError, match="end='\\[end\\]'"):
        Translator(vectorizer(), TARGET[:3], encode, step_fn, max_length=5)


def test_litert_translator_refuses_other_models(tmp_path):
    inp = keras.Input((3,))
    model = keras.Model(inp, keras.layers.Dense(2)(inp))
    path = str(tmp_path / "dense.tflite")
    model.export(path, format="litert", verbose=False)
    with pytest.raises(ValueError, match="'translate'"):
        LiteRTTranslator(path)


@pytest.mark.slow
def test_save_writes_the_folder_the_cli_finds_and_keeps_it(tmp_path):
    from keras_attn_cli.finding import find_translator

    model, encode, step_fn = tiny_model()
    translator = Translator(
        vectorizer(), TARGET, encode, step_fn, max_length=5, trackable=model
    )
    folder = tmp_path / "anything"
    assert translator.save(str(folder)) == str(folder)
    names = sorted(p.name for p in folder.iterdir())
    assert names == [
        "model.tflite",
        "saved_model",
        "source_vocabulary.txt",
        "target_vocabulary.txt",
    ]
    assert (folder / "target_vocabulary.txt").read_text().split("\n")[2:4] == [
        "[start]",
        "[end]",
    ]
    src = (folder / "source_vocabulary.txt").read_text().splitlines()
    assert src == vectorizer().get_vocabulary()
    found = find_translator(type("Args", (), {"models": str(tmp_path)})())
    assert found == str(folder / "saved_model")
    translator.save(str(folder))  # an earlier export is replaced
    (folder / "source_vocabulary.txt").write_text("mine\n")
    before = (folder / "model.tflite").read_bytes()
    with pytest.raises(ValueError, match="overwrite=True"):
        translator.save(str(folder))
    assert (folder / "source_vocabulary.txt").read_text() == "mine\n"
    assert (folder / "model.tflite").read_bytes() == before
    other = tmp_path / "other"
    other.mkdir()
    (other / "model.tflite").write_text("a user's notes")
    with pytest.raises(ValueError, match="model.tflite"):
        translator.save(str(other))
    assert sorted(p.name for p in other.iterdir()) == ["model.tflite"]
    third = tmp_path / "third"
    third.mkdir()  # the target vocabulary conflicts: not even the source
    (third / "target_vocabulary.txt").write_text("theirs\n")  # is written
    with pytest.raises(ValueError, match="target_vocabulary"):
        translator.save(str(third))
    assert sorted(p.name for p in third.iterdir()) == ["target_vocabulary.txt"]


@pytest.mark.slow
def test_saved_model_holds_the_weights_not_the_optimizer(tmp_path):
    # A translator built right after training must not ship the optimizer's
    # slots (Adam's two moments triple the SavedModel).
    model, encode, step_fn = tiny_model()
    model.compile("adam", "sparse_categorical_crossentropy")
    src = np.array([[2, 3, 4, 0, 0, 0]], "int32")
    tgt = np.array([[2, 4, 5, 3]], "int32")
    model.fit([src, tgt[:, :-1]], tgt[:, 1:], epochs=1, verbose=0)
    assert model.optimizer.variables
    translator = Translator(
        vectorizer(), TARGET, encode, step_fn, max_length=5, trackable=model
    )
    translator.export(str(tmp_path / "sm"))
    keys = [
        k
        for k, _ in tf.train.list_variables(
            str(tmp_path / "sm" / "variables" / "variables")
        )
        if "VARIABLE_VALUE" in k
    ]
    # Each weight once, under its Keras path; the dropout's seed (read by
    # no signature) and the optimizer's slots are not saved.
    weights = [v for v in model.variables if "seed_generator" not in v.path]
    from keras_attn.export.saved_model import checkpoint_key

    assert sorted(keys) == sorted(checkpoint_key(v.path) for v in weights)
    assert not [k for k in keys if "optimizer" in k], keys


@pytest.mark.slow
def test_beam_search_runs_inside_the_litert_file(tmp_path):
    translator = tiny_translator(
        tiny_model(), beam_width=3, coverage_penalty=0.2
    )
    path = str(tmp_path / "beam.tflite")
    translator.export_tflite(path, search_method="beam")
    from keras_attn.export import tflite_op_names

    ops_used = tflite_op_names(path)
    assert "WHILE" in ops_used and "TOPK_V2" in ops_used
    assert not [o for o in ops_used if "FLEX" in o or "CUSTOM" in o]
    texts = ["a b c", "d .", "c c a b", "a", "b b b", ""]
    report = translator.check_litert(path, texts, greedy=False)
    assert report["agreement_with_keras"] == 1.0 and report["search"] == "beam"
    with pytest.raises(ValueError, match="search_method='sample'"):
        translator.export_tflite(
            str(tmp_path / "x.tflite"), search_method="sample"
        )


LONG = ["a b c , d a", "a b . c d a b", "", "a", "a b c and d c", " \t "]


def test_segmenter_translates_the_pieces_one_by_one():
    """A long input is cut into the pieces `keras_attn_runtime.segments`
    gives; each piece is translated as on its own, the translations
    joined, the tokens concatenated and the attention block-diagonal."""
    from keras_attn_runtime import segmenter, segments

    parts = tiny_model()
    cut = tiny_translator(
        parts, segmenter="english_clauses", segment_longer_than=2
    )
    plain = tiny_translator(parts)
    out = cut.translate(tf.constant(LONG))
    stages = segmenter("english_clauses")
    counts = [len(segments(t, stages, 2)) for t in LONG]
    assert out["pieces"].numpy().tolist() == counts == [2, 2, 0, 1, 2, 0]
    assert out["source_length"].numpy().tolist() == [S] * len(LONG)
    for row, text in enumerate(LONG):
        pieces = segments(text, stages, 2)
        if not pieces:
            assert out["translation"].numpy()[row] == b""
            assert not any(out["target_tokens"].numpy()[row])
            continue
        alone = plain.translate(tf.constant(pieces))
        expected = " ".join(t.decode() for t in alone["translation"].numpy())
        assert out["translation"].numpy()[row].decode() == expected.strip()
        blocks, t0, s0 = out["attention"].numpy()[row], 0, 0
        sources, targets = [], []
        for p in range(len(pieces)):
            src = [w for w in alone["source_tokens"].numpy()[p] if w]
            tgt = [w for w in alone["target_tokens"].numpy()[p] if w]
            sources += src
            targets += tgt
            block = blocks[t0 : t0 + len(tgt), s0 : s0 + len(src)]
            ref = alone["attention"].numpy()[p][: len(tgt), : len(src)]
            np.testing.assert_allclose(block, ref, atol=1e-6)
            # Nothing outside the piece's own block in its rows.
            assert np.abs(blocks[t0 : t0 + len(tgt)]).sum() == (
                pytest.approx(np.abs(ref).sum(), abs=1e-5)
            )
            t0, s0 = t0 + len(tgt), s0 + len(src)
        got_src = [w for w in out["source_tokens"].numpy()[row] if w]
        got_tgt = [w for w in out["target_tokens"].numpy()[row] if w]
        assert (got_src, got_tgt) == (sources, targets)
    # A batch of blank inputs has no piece at all: empty outputs.
    blank = cut.translate(tf.constant(["", " "]))
    assert blank["translation"].numpy().tolist() == [b"", b""]
    assert blank["pieces"].numpy().tolist() == [0, 0]
    assert tuple(blank["attention"].shape) == (2, 0, 0)
    # Under the threshold nothing is cut: the same as without a segmenter.
    short = ["a b", "a , b", "c . d"]
    never = tiny_translator(parts, segmenter="english_clauses")
    assert never.translate(tf.constant(short))[
        "translation"
    ].numpy().tolist() == (
        plain.translate(tf.constant(short))["translation"].numpy().tolist()
    )


def test_graph_pieces_are_the_runtime_pieces():
    """`Translator`'s in-graph cutting (`translation.segmenting.cut`, RE2)
    and the runtime's (`keras_attn_runtime.segments`, Python `re`) give
    the same pieces."""
    from keras_attn.translation import segmenting
    from keras_attn_runtime import SEGMENTERS, segments

    texts = [
        "The cat sleeps on the sofa , my mother washes the dishes after "
        "lunch , the children are playing in the garden and my grandmother "
        "knits warm sweaters because it is very cold here .",
        "He went home early;  we stayed at the party until midnight. "
        "She said: élan is fine, but I was tired!  Then\twe left?",
        "Tom has 1,000 books and 3.5 cats, and a dog but no time at all.",
        "short, one.",
        "",
        "   ",
        "a,b,c,d,e,f,g,h,i,j",
        "und so weiter, ändern, öffnen, über alles hinaus, wirklich gut",
    ]
    # And random ones made of what the rules look at.
    rng = np.random.default_rng(0)
    parts = [
        "a",
        "ß",
        "éa",
        "and",
        "But",
        "because",
        "1,000",
        "x.y",
        ",",
        ".",
        "!",
        "?",
        ";",
        ":",
        " ",
        "  ",
        "\t",
        "\n",
    ]
    for _ in range(200):
        picked = rng.choice(len(parts), rng.integers(0, 30))
        glue = rng.choice(["", " "], len(picked))
        texts.append(
            "".join(g + parts[i] for g, i in zip(glue, picked, strict=True))
        )
    for name, stages in SEGMENTERS.items():
        for longer in (1, 4, 8):
            pieces, rows = segmenting.cut(tf.constant(texts), name, longer)
            got = [[] for _ in texts]
            for piece, row in zip(pieces.numpy(), rows.numpy(), strict=True):
                got[row].append(piece.decode())
            assert got == [segments(t, stages, longer) for t in texts]


def test_segmenter_arguments_are_checked():
    for kwargs, name in (
        ({"segmenter": "klingon"}, "segmenter"),
        (
            {"segmenter": "english_clauses", "segment_longer_than": 0},
            "segment_longer_than",
        ),
        ({"segment_longer_than": 2.5}, "segment_longer_than"),
        ({"segment_longer_than": True}, "segment_longer_than"),
    ):
        with pytest.raises(ValueError, match=name):
            tiny_translator(tiny_model(), **kwargs)


@pytest.mark.slow
def test_segmenter_travels_to_the_saved_model_and_the_litert_file(tmp_path):
    from keras_attn.loading.trust import check_saved_model

    translator = tiny_translator(
        tiny_model(), segmenter="english_clauses", segment_longer_than=2
    )
    folder = translator.save(str(tmp_path / "t"), search_method="beam")
    check_saved_model(os.path.join(folder, "saved_model"))
    loaded = tf.saved_model.load(os.path.join(folder, "saved_model"))
    expected = translator.translate(tf.constant(LONG))["translation"].numpy()
    again = loaded.signatures["translate"](tf.constant(LONG))["translation"]
    assert again.numpy().tolist() == expected.tolist()
    lite = LiteRTTranslator(os.path.join(folder, "model.tflite"))
    assert [lite.translate(t) for t in LONG] == [t.decode() for t in expected]
    # The pieces were cut: the first input is two pieces, not one.
    assert lite.segment_longer_than == 2
    plain = tiny_translator(tiny_model())
    whole = plain.translate(tf.constant(LONG[:1]))["translation"].numpy()
    assert whole[0] != expected[0]


def test_translator_takes_a_sampler_and_names_bad_ones(tmp_path):
    from keras_attn.seq2seq import samplers

    parts = tiny_model()
    texts = tf.constant(["a b c", "d .", "c c a b"])
    greedy = tiny_translator(parts, sampler="greedy")
    reference = tiny_translator(parts)
    assert (
        greedy.translate(texts)["translation"].numpy().tolist()
        == reference.translate_greedy(texts)["translation"].numpy().tolist()
    )
    top_k = tiny_translator(
        parts,
        sampler={"class_name": "TopKSampler", "config": {"k": 2, "seed": 3}},
    )
    first = top_k.translate(texts)["translation"].numpy().tolist()
    assert top_k.translate(texts)["translation"].numpy().tolist() == first
    with pytest.raises(ValueError, match="sampler='top-k'"):
        tiny_translator(parts, sampler="top-k")
    with pytest.raises(ValueError, match="sampler=ContrastiveSampler"):
        tiny_translator(parts, sampler=samplers.ContrastiveSampler())
    with pytest.raises(ValueError, match="beam_width"):
        tiny_translator(parts, sampler="greedy", beam_width=3)


@pytest.mark.slow
def test_a_litert_file_samples_with_the_numbers_it_is_given(tmp_path):
    # LiteRT has no stateless random op: the file takes one number per
    # output token as an input. With k=1 it is greedy whatever they are;
    # with k=2 a seed repeats its translations.
    from keras_attn.export import tflite_op_names
    from keras_attn.seq2seq import samplers

    top_k = tiny_translator(tiny_model(), sampler=samplers.TopKSampler(k=2))
    one = str(tmp_path / "top_1.tflite")
    top_k.export_tflite(one, search_method=samplers.TopKSampler(k=1))
    greedy_file = str(tmp_path / "greedy.tflite")
    top_k.export_tflite(greedy_file)
    words = ["a b c", "d .", "c c a b", "b b b"]
    want = [LiteRTTranslator(greedy_file).translate(t) for t in words]
    assert [LiteRTTranslator(one, seed=7).translate(t) for t in words] == want
    two = str(tmp_path / "top_2.tflite")
    top_k.export_tflite(two, search_method=top_k.sampler)
    lite = LiteRTTranslator(two, seed=5)
    assert lite.runner.get_input_details()["uniforms"]["shape"].tolist() == [
        top_k.max_length,
        1,
    ]
    again = LiteRTTranslator(two, seed=5)
    first = [lite.translate(t) for t in words * 3]
    assert [again.translate(t) for t in words * 3] == first
    assert len(set(first)) > len(words)  # it samples: repeats differ
    assert "RANDOM" not in " ".join(tflite_op_names(two))
    with pytest.raises(ValueError, match="seed=-1"):
        LiteRTTranslator(two, seed=-1)
