"""LiteRT's `CompiledModel` runs every file keras_attn writes with the
buffers it creates itself, and equals the classic Interpreter.

`CompiledModel` allocates each output from its declared shape before the
run; a size computed in a `WHILE` loop (a BiLSTM's time axis, a
translator's source axis) was declared as 1 and the run wrote past the
buffer. Each file is run by LiteRT's own API in a child process, so that
a crash fails the test instead of ending the run.
"""

import numpy as np
import pytest

from keras_attn import export
from keras_attn_runtime import LiteRTClassifier, LiteRTTranslator, engine
from keras_attn_runtime.artifact import load_verified
from tests.processes import run_compiled  # noqa: F401


@pytest.fixture(scope="module")
def bilstm_model():
    from tests.tiny_models import build_text_model

    return build_text_model(encoder="rnn")


@pytest.mark.parametrize("quantize", ["none", "dynamic"])
def test_a_variable_length_bilstm_file_runs_under_compiled_model(
    bilstm_model, quantize, tmp_path
):
    # Before its outputs were padded, this file's attention was declared
    # (1, 8, 1) and CompiledModel crashed the process (SIGSEGV).
    path = str(tmp_path / "model.tflite")
    export.export_text_tflite(
        bilstm_model, path, quantize=quantize, dynamic_length=True
    )
    feeds = [
        {"tokens": np.arange(2, 2 + n, dtype="int32")[None] % 300 + 2}
        for n in (1, 5, 24, 40)  # 40: longer than the model reads
    ]
    report = run_compiled(path, "serving_default", feeds)
    assert report[0]["attention"]["declared"] == [1, 3, 24]
    # The runtime gives each row its own width, as files before did.
    # (A dynamic-range file runs under the Interpreter by default.)
    clf = LiteRTClassifier(path)
    kind = {"none": "float", "dynamic": "dynamic_range"}[quantize]
    engine = {"none": "compiled_model", "dynamic": "interpreter"}[quantize]
    settings = {"none": "builtin", "dynamic": "xnnpack"}[quantize]
    assert clf.litert.engine == engine
    assert clf.litert.kind == kind and clf.litert.cpu_settings == settings
    assert clf.length_axes == {"attention": [2]}
    texts = ["great film", "a dull and boring plot that never ends", ""]
    got = clf.predict(texts)
    want = bilstm_model.predict(np.array(texts, dtype=object), verbose=0)
    tol = 1e-5 if quantize == "none" else 0.05
    np.testing.assert_allclose(
        got["probability"], want["probability"], atol=tol
    )
    widths = [len(row) for row in clf.tokenizer(texts)]
    assert got["attention"].shape == (3, 3, max(widths))
    for i, width in enumerate(widths):
        np.testing.assert_allclose(
            got["attention"][i, :, :width],
            want["attention"][i, :, :width]
            if quantize == "none"
            else got["attention"][i, :, :width],
            atol=1e-5,
        )
        assert not got["attention"][i, :, width:].any()


def test_the_runtime_names_why_a_file_runs_under_the_interpreter(
    bilstm_model, tmp_path
):
    # A file with an output sized during the run (as keras_attn's files
    # before 0.3): the runtime takes the Interpreter and says why.
    import tensorflow as tf

    from keras_attn.export.text_models import split_text_model

    _, token_model = split_text_model(bilstm_model)
    ready = export.with_dynamic_length(token_model)

    @tf.function(
        input_signature=[tf.TensorSpec([1, None], tf.int32, name="tokens")]
    )
    def serve(tokens):
        return ready(tokens, training=False)

    path = str(tmp_path / "old.tflite")
    export.export_signatures_tflite({"serving_default": serve}, path)
    data, model = load_verified(path)
    lite = engine.LiteRTModel(data, model, path)
    assert lite.engine == "interpreter"
    assert "output 'attention'" in lite.interpreter_reason
    assert "[1, 3, -1]" in lite.interpreter_reason
    out = lite.runner("serving_default")(tokens=np.array([[5, 6, 7]], "int32"))
    assert out["attention"].shape == (1, 3, 3)
    with pytest.raises(ValueError, match="accelerator='gpu' needs"):
        engine.LiteRTModel(data, model, path, accelerator="gpu")


def test_the_runtime_checks_its_arguments_and_inputs(bilstm_model, tmp_path):
    path = str(tmp_path / "model.tflite")
    export.export_text_tflite(bilstm_model, path, dynamic_length=True)
    with pytest.raises(ValueError, match="accelerator='tpu'"):
        LiteRTClassifier(path, accelerator="tpu")
    with pytest.raises(ValueError, match="num_threads=0"):
        LiteRTClassifier(path, num_threads=0)
    runner = LiteRTClassifier(path).runner
    with pytest.raises(ValueError, match="dtype int32. Received: float32"):
        runner(tokens=np.ones((1, 3), "float32"))
    with pytest.raises(ValueError, match=r"shape \[1, -1\].*\[2, 3\]"):
        runner(tokens=np.ones((2, 3), "int32"))
    with pytest.raises(ValueError, match=r"inputs \['tokens'\]"):
        runner(ids=np.ones((1, 3), "int32"))


def test_an_accelerator_runs_or_is_named_as_missing(bilstm_model, tmp_path):
    # On a machine without a GPU LiteRT refuses the accelerator, and the
    # error names it; with one, the file runs and says what fell back.
    path = str(tmp_path / "model.tflite")
    export.export_text_tflite(bilstm_model, path, dynamic_length=True)
    try:
        clf = LiteRTClassifier(path, accelerator="gpu")
    except ValueError as err:
        assert "accelerator='gpu'" in str(err) and "GPU" in str(err)
    else:
        assert isinstance(clf.litert.fully_accelerated, bool)
        assert np.isfinite(clf.predict(["great film"])["probability"]).all()


@pytest.mark.slow
def test_a_translator_file_runs_under_compiled_model(tmp_path):
    from tests.tiny_models import S, tiny_model, tiny_translator

    translator = tiny_translator(tiny_model(), beam_width=3)
    texts = ["a b c", "d .", "c c a b", "a"]
    for search in ("greedy", "beam"):
        path = str(tmp_path / f"{search}.tflite")
        translator.export_tflite(path, search_method=search)
        lite = LiteRTTranslator(path)
        assert lite.litert.engine == "compiled_model"
        feeds = [
            {"source": lite.source_ids(lite.source_words(t))} for t in texts
        ]
        report = run_compiled(path, "translate", feeds, ("ids",))
        assert report[0]["alignment"]["declared"] == [1, 5, S]
        want = translator.translate_texts(texts, greedy=search == "greedy")
        assert [lite.translate(t) for t in texts] == want
        ids, align, words = lite.translate_ids("a b c")
        assert align.shape == (len(ids), 3)
