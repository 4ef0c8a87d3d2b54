"""The shipped models in saved_models/ still give the known answers."""

import glob
import json
import os
import re

import numpy as np
import pytest

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = os.path.join(ROOT, "saved_models")
IMDB = sorted(glob.glob(os.path.join(SHIPPED, "imdb_*", "model.keras")))
TRANSLATOR = os.path.join(SHIPPED, "translation_en_fr")

# Clear reviews written for this test (not from IMDB), with their labels.
REVIEWS = [
    (
        "An absolute masterpiece: brilliant acting, a moving story and a "
        "beautiful score. I loved every minute and will watch it again.",
        1,
    ),
    (
        "Wonderful film! Funny, touching and superbly directed. The best "
        "movie I have seen this year, highly recommended.",
        1,
    ),
    (
        "A great cast and a clever, gripping plot. Excellent from start to "
        "finish.",
        1,
    ),
    (
        "The worst movie I have ever seen. Terrible acting, a stupid plot "
        "and boring dialogue. A complete waste of time.",
        0,
    ),
    (
        "Awful. Dull, badly written and far too long. I wanted to walk out "
        "after twenty minutes. Avoid it.",
        0,
    ),
    (
        "Poor script, horrible effects and lazy directing. Utterly "
        "disappointing and painful to sit through.",
        0,
    ),
]


def test_shipped_imdb_models_exist():
    assert IMDB, "no saved_models/imdb_*/model.keras is shipped"


@pytest.mark.parametrize("path", IMDB, ids=lambda p: p.split(os.sep)[-2])
def test_imdb_model_predicts_clear_reviews(path):
    import keras
    import tensorflow as tf

    import keras_attn  # noqa: F401

    folder = os.path.dirname(path)
    texts = np.array([r for r, _ in REVIEWS], dtype=object)
    labels = np.array([y for _, y in REVIEWS])
    model = keras.models.load_model(path)
    probs = model.predict(texts, verbose=0)["probability"][:, 0]
    np.testing.assert_array_equal(probs > 0.5, labels == 1)
    metrics = json.load(open(os.path.join(folder, "metrics.json")))
    assert metrics["test_accuracy"] > 0.8
    sm = os.path.join(folder, "saved_model")
    if os.path.isdir(sm):
        fn = tf.saved_model.load(sm).signatures["serving_default"]
        got = fn(tf.constant(list(texts)))["probability"].numpy()[:, 0]
        np.testing.assert_allclose(got, probs, atol=1e-5)
    for name, tol in (
        ("model_float32.tflite", 1e-4),
        ("model_dynamic_int8.tflite", 5e-2),
    ):
        if os.path.isfile(os.path.join(folder, name)):
            from keras_attn_runtime import LiteRTClassifier

            clf = LiteRTClassifier(os.path.join(folder, name))
            got = clf.predict(list(texts))["probability"][:, 0]
            assert np.abs(got - probs).max() <= tol, name


@pytest.mark.skipif(
    not os.path.isdir(os.path.join(TRANSLATOR, "saved_model")),
    reason="no translator shipped (only the metrics of a failed run)",
)
def test_shipped_translator_easy_sentences():
    import tensorflow as tf

    fn = tf.saved_model.load(
        os.path.join(TRANSLATOR, "saved_model")
    ).signatures["translate"]
    cases = {
        "I am tired.": ("fatigué", "fatiguée"),
        "Thank you.": ("merci", "Merci"),
        "I love you.": ("aime",),
        "Hello!": ("salut", "bonjour", "Salut", "Bonjour"),
    }
    out = fn(tf.constant(list(cases)))["translation"].numpy()
    got = [t.decode() for t in out]
    hits = [
        any(w in g for w in want)
        for want, g in zip(cases.values(), got, strict=True)
    ]
    assert sum(hits) >= 3, got


@pytest.mark.skipif(
    not os.path.isdir(os.path.join(TRANSLATOR, "saved_model")),
    reason="no translator shipped",
)
def test_shipped_translator_writes_cased_french_and_copies_numbers():
    import tensorflow as tf

    loaded = tf.saved_model.load(os.path.join(TRANSLATOR, "saved_model"))
    fn = loaded.signatures["translate"]
    cases = [
        "I am tired.",
        "Tom is here.",
        "I have 3 cats and 12 dogs.",
        "It's 10:30.",
        "",
        "   ",
    ]
    probe = fn(tf.constant(["x"]))
    limit = probe["attention"].shape[-1]  # tokens read
    if "source_length" in probe:  # a translator that cuts long inputs
        limit = int(probe["source_length"].numpy()[0])
    cases.append(" ".join(["very"] * (limit + 10)) + " long.")
    out = fn(tf.constant(cases))
    got = [t.decode() for t in out["translation"].numpy()]
    assert got[0][:1].isupper() and got[1].startswith("Tom"), got
    assert {"3", "12"} <= set(re.findall(r"\d+", got[2])), got[2]
    assert "10" in got[3] and "30" in got[3], got[3]
    assert got[4] == got[5] == "", got  # nothing invented for no input
    truncated = out["source_truncated"].numpy().tolist()
    assert truncated == [False] * 6 + [True]


@pytest.mark.skipif(
    not os.path.isfile(os.path.join(TRANSLATOR, "model.tflite")),
    reason="no LiteRT translator shipped",
)
def test_shipped_litert_translator_matches_the_saved_model():
    import tensorflow as tf

    from keras_attn_runtime import LiteRTTranslator

    sentences = [
        "I am tired.",
        "Thank you.",
        "Where is the station?",
        "I have 3 cats and 12 dogs.",
        "",
    ]
    # The file runs one search (its config says which): the SavedModel's
    # signature with that search must give the same translations.
    search = _translator_config().get("search", "greedy")
    signature = "translate" if search == "beam" else "translate_greedy"
    fn = tf.saved_model.load(
        os.path.join(TRANSLATOR, "saved_model")
    ).signatures[signature]
    want = [
        t.decode() for t in fn(tf.constant(sentences))["translation"].numpy()
    ]
    lite = LiteRTTranslator(os.path.join(TRANSLATOR, "model.tflite"))
    assert [lite.translate(s) for s in sentences] == want


def test_the_shipped_translator_file_streams_on_its_one_call_weights():
    # One file: the one-call answers above, and streams joined to the
    # same words; `keras-attn translate --stream` needs no flag.
    from keras_attn_runtime import LiteRTTranslator

    lite = LiteRTTranslator(os.path.join(TRANSLATOR, "model.tflite"))
    assert lite.decoder is not None and lite.runner is not None
    assert lite.decoder.step_batches == [4, 16, 32]
    sentences = ["I am tired.", "Where is the station?", "Thank you."]
    for text in sentences:
        assert "".join(lite.stream(text)) == lite.translate(text)
    proc = _cli("translate", "--stream", *sentences)
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert "(streaming)" in proc.stdout
    for text in sentences:
        assert f"{text}  ->  {lite.translate(text)}" in proc.stdout


def _cli(*args):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "keras_attn_cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )


def test_translate_command_errors_cleanly_without_a_translator(tmp_path):
    proc = _cli("translate", "--model", str(tmp_path), "Hello.")
    assert proc.returncode == 2, proc.stderr[-1500:]
    assert "keras-attn: error: Expected a translator SavedModel" in proc.stderr
    assert "--model=" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(
    not os.path.isdir(os.path.join(TRANSLATOR, "saved_model")),
    reason="no translator shipped",
)
def test_translate_command_prints_translation_and_alignment():
    proc = _cli("translate", "--alignment", "Thank you.", "I am tired.")
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert "merci" in proc.stdout.lower()
    # the alignment grid: one row per French token, digits 0-9
    rows = [r for r in proc.stdout.splitlines() if r[:1].isalpha()]
    assert any(r.split()[-1].isdigit() for r in rows), proc.stdout


@pytest.mark.skipif(
    not os.path.isdir(os.path.join(TRANSLATOR, "saved_model")),
    reason="no translator shipped",
)
def test_translate_command_refuses_too_long_input_clearly():
    limit = 64 if _subword_translator() else 16
    long = " ".join(["very"] * (limit + 10)) + " long."
    proc = _cli("translate", "Thank you.", long)
    assert proc.returncode == 2, proc.stdout
    said = proc.stderr
    assert f"keras-attn: error: Expected a text of at most {limit} " in said
    assert "(the model's window)" in said and "in 'very very" in said
    assert "Traceback" not in said and said.count("\n") == 1


EDGE = os.path.join(SHIPPED, "imdb_edge")


def test_shipped_edge_model_is_full_integer_and_runs_without_tensorflow():
    # The numpy-only runtime, as on a device: the file carries its
    # vocabulary; its quantized ops and size are those litert.json records;
    # on 500 test reviews it agrees with the recorded test accuracy.
    from keras_attn.export import tflite_op_names
    from keras_attn_runtime import LiteRTClassifier

    path = os.path.join(EDGE, "model_full_int8.tflite")
    report = json.load(open(os.path.join(EDGE, "litert.json")))
    entry = report["model_full_int8.tflite"]
    assert os.path.getsize(path) == entry["size_bytes"]
    ops_used = tflite_op_names(path)
    assert ops_used == entry["ops"]
    assert not [o for o in ops_used if "FLEX" in o or "CUSTOM" in o]
    # Full integer: no op computes in float; the final DEQUANTIZE ops
    # turn the int8 outputs into float32 for the caller.
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(path)
    dtypes = {
        t["index"]: np.dtype(t["dtype"]).name
        for t in interpreter.get_tensor_details()
    }
    # The padding mask enters as 0/1 floats converted at once (a `CAST`
    # from bool and its `QUANTIZE`): conversions, no float arithmetic.
    conversions = {"DEQUANTIZE", "QUANTIZE", "CAST"}
    float_ops = {
        op["op_name"]
        for op in interpreter._get_ops_details()
        if op["op_name"] not in conversions
        and "float32"
        in [dtypes[i] for i in (*op["inputs"], *op["outputs"]) if i >= 0]
    }
    assert not float_ops, float_ops
    for op in interpreter._get_ops_details():
        if op["op_name"] == "CAST":  # bool in, float32 out to a QUANTIZE
            assert [dtypes[i] for i in op["inputs"]] == ["bool"], op
    clf = LiteRTClassifier(path)
    texts = [r for r, _ in REVIEWS]
    probs = clf.predict(texts)["probability"][:, 0]
    np.testing.assert_array_equal(probs > 0.5, [y == 1 for _, y in REVIEWS])
    import tensorflow_datasets as tfds

    test = tfds.load(
        "imdb_reviews", split="test[:500]", batch_size=-1, as_supervised=True
    )
    reviews = [t.decode() for t in test[0].numpy()]
    probs = clf.predict(reviews)["probability"][:, 0]
    accuracy = float(np.mean((probs > 0.5) == (test[1].numpy() == 1)))
    assert abs(accuracy - entry["test_accuracy"]) < 0.04, accuracy
    assert entry["test_accuracy"] > 0.86
    metrics = json.load(open(os.path.join(EDGE, "metrics.json")))
    float_accuracy = metrics["test_accuracy_litert_none"]
    assert abs(entry["test_accuracy"] - float_accuracy) <= 0.005


PAIRS = os.path.join(ROOT, "..", "shared", "data", "translation", "pairs.tsv")


def _translator_config():
    """The shipped LiteRT translator's `keras_attn.config` ({} if none)."""
    from keras_attn_runtime import artifact

    path = os.path.join(TRANSLATOR, "model.tflite")
    if not os.path.isfile(path):
        return {}
    _, model = artifact.load_verified(path)
    return json.loads(artifact.metadata(model)[artifact.METADATA_CONFIG])


def _subword_translator():
    """Whether the shipped LiteRT translator declares WordPiece subwords."""
    return "subwords" in _translator_config()


EVERYDAY = os.path.join(ROOT, "tests", "data", "everyday_sentences.txt")


def english_left(sources, translations):
    """Per sentence, the source words (3+ letters) found in its translation
    that no French sentence of the training data uses (a word spelled the
    same in French, such as "six" or "orange", does not count)."""
    from keras_attn_runtime.text import split_sentence

    french = set()
    with open(PAIRS, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 2:
                french.update(split_sentence(parts[1]).lower().split())
    found = []
    for source, translation in zip(sources, translations, strict=True):
        out = set(split_sentence(translation).lower().split())
        words = split_sentence(source).lower().split()
        found.append(
            [
                w
                for w in words
                if len(w) >= 3 and w.isalpha() and w in out and w not in french
            ]
        )
    return found


@pytest.mark.skipif(
    not os.path.isdir(os.path.join(TRANSLATOR, "saved_model"))
    or not os.path.isfile(PAIRS),
    reason="no translator shipped, or no training pairs beside the checkout",
)
def test_shipped_translator_leaves_no_english_in_everyday_sentences():
    import tensorflow as tf

    with open(EVERYDAY, encoding="utf-8") as f:
        sentences = [line.strip() for line in f if line.strip()]
    assert len(sentences) >= 200 and len(set(sentences)) == len(sentences)
    fn = tf.saved_model.load(
        os.path.join(TRANSLATOR, "saved_model")
    ).signatures["translate"]
    out = fn(tf.constant(sentences))["translation"].numpy()
    got = [t.decode() for t in out]
    left = {
        s: (t, words)
        for s, t, words in zip(
            sentences, got, english_left(sentences, got), strict=True
        )
        if words
    }
    if not _subword_translator():  # measured: 195 of 203
        assert left  # unknown-word copying writes English: the known defect
        pytest.xfail(
            f"the word-level translator leaves English in {len(left)} of "
            f"{len(sentences)} everyday sentences"
        )
    assert not left, left


@pytest.mark.skipif(
    not os.path.isdir(os.path.join(TRANSLATOR, "saved_model")),
    reason="no translator shipped",
)
def test_shipped_translator_translates_forty_words_whole():
    import tensorflow as tf

    sentence = (
        "The cat sleeps on the sofa , my mother washes the dishes after "
        "lunch , the children are playing in the garden and my grandmother "
        "knits warm sweaters for the whole family every winter because it "
        "is very cold here ."
    )
    assert len(sentence.split()) >= 40
    fn = tf.saved_model.load(
        os.path.join(TRANSLATOR, "saved_model")
    ).signatures["translate"]
    out = fn(tf.constant([sentence]))
    if not _subword_translator():  # the word-level model reads 16 words
        assert out["source_truncated"].numpy().tolist() == [True]
        pytest.xfail("the word-level translator reads 16 words only")
    assert out["source_truncated"].numpy().tolist() == [False]
    tokens = [t for t in out["source_tokens"].numpy()[0] if t]
    assert tokens[-1] == b"."  # the last word was read
    # Translated whole: cut into the clauses the runtime cuts it into
    # (the training sentences have at most 7 words), each translated on
    # its own, none dropped, each search ended by its end token.
    from keras_attn_runtime import segmenter, segments

    config = _translator_config()
    pieces = segments(
        sentence,
        segmenter(config["segmenter"]),
        config["segment_longer_than"],
    )
    assert out["pieces"].numpy().tolist() == [len(pieces)] and len(pieces) >= 4
    alone = fn(tf.constant(pieces))
    assert alone["pieces"].numpy().tolist() == [1] * len(pieces)
    each = [t.decode() for t in alone["translation"].numpy()]
    written = [sum(map(bool, row)) for row in alone["target_tokens"].numpy()]
    assert all(each) and max(written) < config["max_length"], written
    assert out["translation"].numpy()[0].decode() == " ".join(each)


SAVED_MODELS = sorted(glob.glob(os.path.join(SHIPPED, "*", "saved_model")))


@pytest.mark.parametrize(
    "folder", SAVED_MODELS, ids=[p.split(os.sep)[-2] for p in SAVED_MODELS]
)
def test_shipped_saved_model_runs_under_the_tf_serving_loader(folder):
    """Every signature of every shipped SavedModel, restored as TensorFlow
    Serving restores it, answers as `tf.saved_model.load` does, on text
    and on blank and empty batches (each blank input gives no words)."""
    from tests.export.tf_serving import (
        assert_same,
        run_tf1,
        run_tf2,
        signature_names,
    )

    batches = [["A fine day.", "  "], [""], ["   "], ["", "x"], []]
    for signature, inputs in signature_names(folder).items():
        for batch in batches:
            feed = {inputs[0]: np.array(batch, dtype=object)}
            tf1 = run_tf1(folder, feed, signature)
            assert_same(tf1, run_tf2(folder, feed, signature), atol=1e-6)
            if "translation" in tf1:
                blank = [not t.strip() for t in batch]
                got = [
                    t
                    for t, b in zip(tf1["translation"], blank, strict=True)
                    if b
                ]
                assert got == [b""] * sum(blank), signature


def test_shipped_keras_file_answers_as_its_saved_model():
    """The `.keras` file (with the installed Keras) against the
    SavedModel on 200 test reviews; the next Keras runs the same check
    in tests/test_next_versions.py."""
    from tests import shipped_parity

    result = shipped_parity.compare(200)
    assert result["max_abs_dp"] <= shipped_parity.TOLERANCE, result
    assert result["max_attention_on_padding"] == 0.0, result


SHIPPED_LITERT = sorted(
    glob.glob(
        os.path.join(
            os.path.dirname(__file__), "..", "saved_models", "*", "*.tflite"
        )
    )
)


@pytest.mark.parametrize(
    "path", SHIPPED_LITERT, ids=lambda p: "/".join(p.split(os.sep)[-2:])
)
def test_every_shipped_litert_file_runs_under_compiled_model(path):
    # LiteRT's documented CompiledModel use (its own buffers) in a child
    # process, equal to the Interpreter: a BiLSTM review at several
    # lengths, or translator sentences of several lengths.
    from keras_attn_runtime import LiteRTClassifier, LiteRTTranslator
    from tests.processes import run_compiled

    if "translation" in path:
        lite = LiteRTTranslator(path)
        texts = ["Hello.", "Where is the station?", "I have 3 cats and a dog."]
        feeds = [
            {"source": lite.source_ids(lite.source_words(t))} for t in texts
        ]
        run_compiled(path, "translate", feeds, ("ids",))
    else:
        clf = LiteRTClassifier(path)
        rows = clf.tokenizer(["Great.", "A dull film, too long by half. " * 30])
        feeds = [{clf.input_name: np.asarray(row)[None]} for row in rows]
        run_compiled(path, "serving_default", feeds)
    # The runtime's reader: CompiledModel, but the Interpreter for a
    # dynamic-range file by default (XNNPACK's speed, the same numbers).
    litert = (lite if "translation" in path else clf).litert
    dynamic = litert.kind == "dynamic_range"
    assert litert.engine == ("interpreter" if dynamic else "compiled_model")


LM = os.path.join(SHIPPED, "translation_en_fr_lm")
LM_SENTENCES = ["I am tired.", "Where is the station?", "We have to leave now."]


def test_the_decoder_only_translator_answers_alike_in_litert_lm_and_keras(
    tmp_path,
):
    # `litert-lm run model.litertlm --prompt ... --backend cpu`, no
    # template flags, prints the French that `keras-attn translate
    # --model translation_en_fr_lm` prints from the Keras model. The
    # bundle is copied: the engine writes a kernel cache beside it.
    import shutil
    import subprocess
    import sys

    cli = shutil.which("litert-lm") or os.path.join(
        os.path.dirname(sys.executable), "litert-lm"
    )
    if not os.path.isfile(cli):
        pytest.skip("LiteRT-LM's CLI (pip install litert-lm) is not installed")
    bundle = str(tmp_path / "model.litertlm")
    shutil.copy(os.path.join(LM, "model.litertlm"), bundle)
    engine = []
    for sentence in LM_SENTENCES:
        done = subprocess.run(
            [cli, "run", bundle, "--prompt", sentence, "--backend", "cpu"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        engine.append(done.stdout.strip())
    done = subprocess.run(
        [sys.executable, "-m", "keras_attn_cli", "translate", "--model"]
        + ["translation_en_fr_lm", *LM_SENTENCES],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    printed = [line.split("  ->  ")[1] for line in done.stdout.splitlines()[2:]]
    assert printed == engine
    assert engine[0].startswith("Je suis fatigu")
    metrics = json.load(open(os.path.join(LM, "metrics.json")))
    assert metrics["validation_greedy"]["bleu_cased"] > 40
    assert metrics["litertlm_validation_greedy"]["equal_to_keras"] > 0.9
