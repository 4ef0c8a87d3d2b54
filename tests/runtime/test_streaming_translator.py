"""A translator as a streaming LiteRT file
(`keras_attn.translation.export_streaming_translator`): the runtime's
`LiteRTTranslator` translates with it as the Keras translator does (its
beam search and its greedy search, unknown words copied through the
attention, long inputs cut), and `stream` yields the same words in parts.
"""

import os

import keras
import pytest

from keras_attn.seq2seq import samplers
from tests.tiny_models import tiny_model, tiny_translator

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="exports need TensorFlow"
)

# "a zz b": an unknown word, copied; the last, longer than the model
# reads, is cut into two sentences.
TEXTS = ["a b c", "d .", "c c a b", "a", "a zz b", "b d c a . c b a d c ."]


@pytest.mark.parametrize(
    "sampler",
    [
        samplers.BeamSampler(3, 0.6, 0.2),
        pytest.param(samplers.GreedySampler(), marks=pytest.mark.slow),
    ],
)
def test_a_streaming_translator_translates_as_keras(sampler, tmp_path):
    from keras_attn.translation import export_streaming_translator
    from keras_attn_runtime import LiteRTTranslator

    translator = tiny_translator(
        tiny_model(),
        sampler=sampler,
        segmenter="english_clauses",
        segment_longer_than=5,
    )
    want = translator.translate(tf.constant(TEXTS))["translation"].numpy()
    want = [t.decode() for t in want]
    path = str(tmp_path / "streaming.tflite")
    export_streaming_translator(translator, path, batch_size=3)
    lite = LiteRTTranslator(path)
    dynamic = lite.litert.kind == "dynamic_range"
    assert lite.decoder is not None
    assert lite.decoder.engine == (
        "interpreter" if dynamic else "compiled_model"
    )
    signatures = lite.litert.signatures  # the encoder runs once a sentence
    width = getattr(sampler, "beam_width", 1)
    assert signatures["prefill"]["inputs"]["source"]["shape"][0] == 3 // width
    assert signatures["decode"]["inputs"]["tokens"]["shape"][0] == 3
    assert [lite.translate(t) for t in TEXTS] == want
    assert len(set(want)) > 3, want  # the sentences translate differently
    for text, expected in zip(TEXTS, want, strict=True):
        assert "".join(lite.stream(text)) == expected
    greedy = translator.translate_greedy(tf.constant(TEXTS))["translation"]
    greedy = [t.decode() for t in greedy.numpy()]
    assert ["".join(lite.stream(t, greedy=True)) for t in TEXTS] == greedy


def test_a_translator_file_that_cannot_stream_is_named(tmp_path):
    from keras_attn.translation import export_streaming_translator
    from keras_attn_runtime import LiteRTTranslator

    translator = tiny_translator(tiny_model())
    with pytest.raises(ValueError, match="batch_size=2"):
        export_streaming_translator(
            translator, str(tmp_path / "s.tflite"), batch_size=2
        )
    top_k = tiny_translator(tiny_model(), sampler="top_k")
    with pytest.raises(ValueError, match="sampler=TopKSampler"):
        export_streaming_translator(top_k, str(tmp_path / "s.tflite"))
    for lengths in [(0,), (translator.source_length,), (2.0,)]:
        with pytest.raises(ValueError, match="prefill_lengths="):
            export_streaming_translator(
                translator,
                str(tmp_path / "s.tflite"),
                prefill_lengths=lengths,
            )
    assert not os.path.exists(tmp_path / "s.tflite")
    path = str(tmp_path / "one_call.tflite")
    translator.export_tflite(path)
    with pytest.raises(ValueError, match="one call per sentence"):
        next(LiteRTTranslator(path).stream("a b"))


def test_translate_stream_prints_the_streamed_words(tmp_path, capsys):
    import keras_attn_cli
    from keras_attn.translation import export_streaming_translator
    from keras_attn_runtime import LiteRTTranslator

    translator = tiny_translator(tiny_model())
    path = str(tmp_path / "streaming.tflite")
    export_streaming_translator(translator, path)
    want = LiteRTTranslator(path).translate("a b c")
    # A text is tokenized once for its window check and its search.
    once, seen = LiteRTTranslator(path), []
    standardize = once.standardize
    once.standardize = lambda text: seen.append(text) or standardize(text)
    once.check_window("a b c")
    assert once.answer("a b c") == want and seen == ["a b c"]
    args = ["translate", "--stream", "--model", str(tmp_path), "a b c"]
    assert keras_attn_cli.main(args) == 0
    out = capsys.readouterr().out
    assert f"a b c  ->  {want}\n" in out and "(streaming)" in out
    one_call = str(tmp_path / "one_call.tflite")
    translator.export_tflite(one_call)
    for flags, needle in (
        (["--model", one_call], "one call per sentence"),
        (["--model", str(tmp_path / "none")], "--model="),
        (["--model", path, "--alignment"], "not both"),
    ):
        assert keras_attn_cli.main(["translate", "--stream", *flags, "a"]) == 2
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err, err


@pytest.mark.slow
def test_a_one_call_file_also_streams_on_one_copy_of_the_weights(tmp_path):
    from keras_attn.translation import export_streaming_translator, files
    from keras_attn_runtime import LiteRTTranslator

    translator = tiny_translator(
        tiny_model(units=24), sampler=samplers.BeamSampler(2, 0.6, 0.2)
    )
    one_call = str(tmp_path / "one_call.tflite")
    translator.export_tflite(one_call, quantize="dynamic", search_method="beam")
    both = str(tmp_path / "both.tflite")
    files.export_tflite(
        translator,
        both,
        quantize="dynamic",
        search_method="beam",
        stream_batch=[2, 4],
    )
    lite, alone = LiteRTTranslator(both), LiteRTTranslator(one_call)
    assert {"translate", "prefill", "decode", "decode_4"} == set(
        lite.litert.signatures
    )
    assert lite.decoder.step_batches == [2, 4]
    assert lite.decoder.config["reads_index"] is False  # rows independent
    for text in TEXTS[:-1]:  # the one-call signature's answers, as before
        assert lite.translate_ids(text)[0] == alone.translate_ids(text)[0]
        assert "".join(lite.stream(text)) == alone.translate(text)
        # The file's one answer: its streams where it streams, else its
        # one call (every door reads `answer`).
        assert lite.answer(text) == "".join(lite.stream(text))
        assert alone.answer(text) == alone.translate(text)
        # Its ids and alignment: the streams' final search, as decided.
        ids, align, words = lite.answer_ids(text)
        assert lite._text(ids, align, words) == lite.answer(text)
        assert alone.answer_ids(text)[0] == alone.translate_ids(text)[0]
    # `translate --stream` finds it in a translator folder as model.tflite.
    import shutil

    import keras_attn_cli

    folder = tmp_path / "folder"
    folder.mkdir()
    shutil.copy(both, folder / "model.tflite")
    args = ["translate", "--stream", "--model", str(folder), "a b c"]
    assert keras_attn_cli.main(args) == 0
    # The int8 scales stored once, after the metadata was written too.
    from keras_attn.export.flatbuffer import read_model, share_quantization

    with open(both, "rb") as f:
        data = f.read()
    assert share_quantization(data) == data
    scaled = [
        t
        for graph in read_model(data).subgraphs
        for t in graph.tensors
        if t.quantization is not None and t.quantization.scale is not None
    ]
    assert len(scaled) > 4  # int8 kernels, read by several signatures
    # One copy of the weights: less than the two files apart.
    streaming = str(tmp_path / "streaming.tflite")
    export_streaming_translator(
        translator, streaming, batch_size=2, quantize="dynamic"
    )
    sizes = [os.path.getsize(p) for p in (both, one_call, streaming)]
    assert sizes[0] < sizes[1] + sizes[2], sizes


@pytest.mark.slow
def test_a_sentence_is_encoded_by_the_shortest_prefill_that_holds_it(
    tmp_path,
):
    """`prefill_lengths`: a `prefill` a source length; the runtime runs
    the shortest that holds a sentence, and its state, zero-padded, is
    the longest one's: the same answers, batched or not."""
    import numpy as np

    from keras_attn.translation import export_streaming_translator
    from keras_attn_runtime import LiteRTTranslator

    translator = tiny_translator(
        tiny_model(), sampler=samplers.BeamSampler(2, 0.6, 0.2)
    )
    want = translator.translate(tf.constant(TEXTS[:-1]))["translation"]
    want = [t.decode() for t in want.numpy()]
    path = str(tmp_path / "streaming.tflite")
    export_streaming_translator(
        translator, path, batch_size=[2, 4], prefill_lengths=(2,)
    )
    lite = LiteRTTranslator(path)
    signatures = lite.litert.signatures
    widths = [
        signatures[n]["inputs"]["source"]["shape"][1]
        for n in ("prefill_0", "prefill_1")
    ]
    assert widths == [2, translator.source_length]
    ran = []
    for name, runner in list(lite.decoder._starts.items()):

        def counted(runner=runner, name=name, **feed):
            ran.append(name)
            return runner(**feed)

        lite.decoder._starts[name] = counted
    assert [lite.translate(t) for t in TEXTS[:-1]] == want
    sizes = [len(lite.source_words(t)) for t in TEXTS[:-1]]
    assert {1, 2} & set(sizes) and max(sizes) > 2, sizes  # both ran
    assert ran == [f"prefill_{int(n > 2)}" for n in sizes], (ran, sizes)
    short = np.array([[3, 4]], "int32")
    padded = np.pad(short, ((0, 0), (0, translator.source_length - 2)))
    ran.clear()
    a, b = lite.decoder.start(source=short), lite.decoder.start(source=padded)
    assert ran == ["prefill_0", "prefill_1"]
    for name in a:  # past the sentence, padding the step masks
        cut = 2 if a[name].shape[1:2] == (translator.source_length,) else None
        np.testing.assert_allclose(
            a[name][:, :cut], b[name][:, :cut], atol=1e-6
        )
    lite.batch_streams()
    assert ["".join(lite.stream(t)) for t in TEXTS[:-1]] == want
