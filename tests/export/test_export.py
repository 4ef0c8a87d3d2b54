"""Export round trips: SavedModel, LiteRT (every quantization), CLI errors."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_attn
import keras_attn_runtime as litert_runtime
from keras_attn import export
from tests.paths import ROOT
from tests.tiny_models import (  # noqa: F401 (the names its tests use)
    LENGTH,
    RNG,
    TEXTS,
    WORDS,
    build_text_model,
)


@pytest.fixture(scope="module")
def text_model():
    return build_text_model()


@pytest.fixture(scope="module")
def attention_model():
    return build_text_model(encoder="attention")


def as_batch(texts):
    return np.array(texts, dtype=object)


@pytest.mark.slow
def test_saved_model_fresh_process_without_keras_attn(text_model, tmp_path):
    path = str(tmp_path / "sm")
    export.export_saved_model(text_model, path)
    want = text_model.predict(as_batch(TEXTS), verbose=0)
    np.savez(tmp_path / "want.npz", **want)
    script = textwrap.dedent(f"""
        import sys
        sys.modules["keras_attn"] = None  # importing it now fails
        import numpy as np, tensorflow as tf
        texts = {TEXTS!r}
        fn = tf.saved_model.load({path!r}).signatures["serving_default"]
        spec = fn.structured_input_signature[1]
        (inp,) = spec.values()
        assert inp.dtype == tf.string and inp.shape.as_list() == [None]
        out = fn(tf.constant(texts))
        want = np.load({str(tmp_path / "want.npz")!r})
        for k in ("probability", "attention"):
            assert np.abs(out[k].numpy() - want[k]).max() <= 1e-5, k
        print("OK", sorted(out))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OK ['attention', 'probability']" in proc.stdout
    # Keras pins the string preprocessing (TextVectorization) to the host
    # CPU, as string ops have no GPU kernels; no model math is pinned, so
    # the attention and RNN run on a GPU when one is present.
    pinned = cpu_pinned_ops(tmp_path / "sm")
    assert "StringSplitV2" in pinned  # the check sees device pins at all
    assert not pinned & MATH_OPS, pinned & MATH_OPS


MATH_OPS = {
    "MatMul",
    "BatchMatMulV2",
    "Einsum",
    "Softmax",
    "Tanh",
    "Sigmoid",
    "BiasAdd",
    "GatherV2",
    "While",
}


def cpu_pinned_ops(folder):
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((folder / "saved_model.pb").read_bytes())
    graph = saved.meta_graphs[0].graph_def
    nodes = list(graph.node)
    for fn in graph.library.function:
        nodes.extend(fn.node_def)
    return {n.op for n in nodes if "CPU" in n.device.upper()}


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_saved_model_mixed_precision(text_model, policy, tmp_path):
    mixed = build_text_model(policy)
    mixed.set_weights(text_model.get_weights())
    path = str(tmp_path / "sm")
    export.export_saved_model(mixed, path)
    fn = tf.saved_model.load(path).signatures["serving_default"]
    out = fn(tf.constant(TEXTS))
    want = text_model.predict(as_batch(TEXTS), verbose=0)
    for k in ("probability", "attention"):
        got = np.asarray(tf.cast(out[k], "float32"))
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, want[k], atol=3e-2)


def test_litert_tokenizer_matches_text_vectorization(text_model):
    vec, _ = export.split_text_model(text_model)
    tok = litert_runtime.Tokenizer(vec.get_vocabulary(), LENGTH)
    np.testing.assert_array_equal(tok(TEXTS), np.asarray(vec(as_batch(TEXTS))))


@pytest.mark.slow
@pytest.mark.parametrize("encoder", ["rnn", "attention"])
@pytest.mark.parametrize("quantize", export.QUANTIZATIONS)
def test_litert_every_quantization(
    text_model, attention_model, encoder, quantize, tmp_path
):
    text_model = text_model if encoder == "rnn" else attention_model
    path = str(tmp_path / f"model_{quantize}.tflite")
    export.export_text_tflite(
        text_model, path, quantize=quantize, calibration_texts=TEXTS[:40]
    )
    ops = export.tflite_op_names(path)
    assert not [op for op in ops if "FLEX" in op.upper() or op == "CUSTOM"]
    assert "READ_VARIABLE" not in ops
    clf = litert_runtime.LiteRTClassifier(path)
    got = clf.predict(TEXTS)
    want = text_model.predict(as_batch(TEXTS), verbose=0)
    tol = {"none": 1e-4, "float16": 2e-3, "dynamic": 2e-2, "int8": 5e-2}
    for k in ("probability", "attention"):
        assert np.abs(got[k] - want[k]).max() <= tol[quantize], k
    if quantize in ("int8", "dynamic") and not (
        quantize == "int8" and encoder == "rnn"
    ):
        # Full-integer int8 unrolls the RNN (one weight copy per step), so
        # the size bar is checked for the attention encoder only.
        f32 = str(tmp_path / "f32.tflite")
        export.export_text_tflite(text_model, f32)
        assert os.path.getsize(path) <= 0.3 * os.path.getsize(f32)


@pytest.mark.slow
@pytest.mark.parametrize("quantize", ["none", "dynamic"])
def test_litert_dynamic_length_equals_static_model(
    text_model, quantize, tmp_path
):
    path = str(tmp_path / "model.tflite")
    export.export_text_tflite(
        text_model, path, quantize=quantize, dynamic_length=True
    )
    ops = export.tflite_op_names(path)
    assert not [op for op in ops if "FLEX" in op.upper() or op == "CUSTOM"]
    clf = litert_runtime.LiteRTClassifier(path)
    assert clf.dynamic
    texts = [*TEXTS, ""]
    lengths = {len(ids) for ids in clf.tokenizer(texts)}
    # the tokenizer stops at the model's length (from the model's metadata)
    assert min(lengths) == 1 and max(lengths) == LENGTH
    got = clf.predict(texts)
    want = text_model.predict(as_batch(texts), verbose=0)
    tol = {"none": 1e-4, "dynamic": 2e-2}[quantize]
    assert got["attention"].shape == want["attention"].shape
    for k in ("probability", "attention"):
        assert np.abs(got[k] - want[k]).max() <= tol, k


@pytest.mark.slow
def test_full_integer_attention_model_takes_a_variable_length(
    attention_model, tmp_path
):
    # No recurrent layer, nothing to unroll: full-integer int8 keeps a
    # variable time axis, calibrated at each text's own length, and the
    # numpy-only runtime feeds each text's own tokens.
    path = str(tmp_path / "model.tflite")
    export.export_text_tflite(
        attention_model,
        path,
        quantize="int8",
        calibration_texts=TEXTS * 4,
        dynamic_length=True,
    )
    ops = export.tflite_op_names(path)
    assert "QUANTIZE" in ops
    assert not [op for op in ops if "FLEX" in op.upper() or op == "CUSTOM"]
    clf = litert_runtime.LiteRTClassifier(path)
    assert clf.dynamic
    assert len({len(ids) for ids in clf.tokenizer(TEXTS)}) > 1
    got = clf.predict(TEXTS)["probability"]
    want = attention_model.predict(as_batch(TEXTS), verbose=0)["probability"]
    assert np.abs(got - want).max() <= 5e-2


def test_litert_dynamic_length_refuses_fixed_length_settings(text_model):
    _, token_model = export.split_text_model(text_model)
    with pytest.raises(ValueError, match="needs a rolled model"):
        export.convert_tflite(
            token_model,
            quantize="int8",
            representative_data=np.ones((2, LENGTH)),
            dynamic_length=True,
        )
    with pytest.raises(ValueError, match="Received: batch_size=4"):
        export.convert_tflite(token_model, batch_size=4, dynamic_length=True)


@pytest.mark.slow
def test_unrolled_bidirectional_matches_rolled_with_padding():
    x = RNG.normal(size=(3, 9, 4)).astype("float32")
    inp = keras.Input((9, 4))
    masked = keras.layers.Masking()(inp)
    out = keras.layers.Bidirectional(
        keras.layers.GRU(3, return_sequences=True)
    )(masked)
    model = keras.Model(inp, out)
    x[0, 5:] = 0.0
    x[1, 2:] = 0.0
    ready = export.litert_ready(model)
    np.testing.assert_allclose(
        ready.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-6
    )


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "keras_attn_cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ROOT},
    )


@pytest.mark.slow
def test_cli_export_and_predict_agree(text_model, tmp_path):
    model_path = str(tmp_path / "model.keras")
    text_model.save(model_path)
    proc = run_cli(
        "export",
        model_path,
        "--saved-model",
        str(tmp_path / "sm"),
        "--tflite",
        str(tmp_path / "m.tflite"),
        "--onnx",
        str(tmp_path / "m.onnx"),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "wrote ONNX" in proc.stdout
    results = []
    for artifact in (
        model_path,
        str(tmp_path / "sm"),
        str(tmp_path / "m.tflite"),
        str(tmp_path / "m.onnx"),
    ):
        proc = run_cli("predict", artifact, "great film", "awful plot")
        assert proc.returncode == 0, proc.stderr[-2000:]
        results.append(
            [
                float(line.split("\t")[0])
                for line in proc.stdout.strip().splitlines()
            ]
        )
    for other in results[1:]:
        np.testing.assert_allclose(other, results[0], atol=1e-4)


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None,
    reason="onnxruntime not installed",
)
def test_onnx_export_matches_keras_and_is_safe(attention_model, tmp_path):
    from keras_attn_runtime import OnnxClassifier

    path = str(tmp_path / "m.onnx")
    export.export_text_model(attention_model, onnx=path)
    want = attention_model.predict(as_batch(TEXTS[:8]), verbose=0)
    got = OnnxClassifier(path).predict(TEXTS[:8])
    for key in ("probability", "attention"):
        np.testing.assert_allclose(got[key], want[key], atol=1e-5)
    # An earlier ONNX export is replaced; anything else is refused.
    export.export_text_model(attention_model, onnx=path)
    # `export_onnx`, as the other formats have their own entry point:
    # the same file's answers.
    alone = str(tmp_path / "alone.onnx")
    assert export.export_onnx(attention_model, alone) == alone
    again = OnnxClassifier(alone).predict(TEXTS[:8])
    for key in ("probability", "attention"):
        np.testing.assert_array_equal(again[key], got[key])
    other = tmp_path / "notes.onnx"
    other.write_text("my notes")
    with pytest.raises(ValueError, match="not an earlier ONNX file"):
        export.export_text_model(attention_model, onnx=str(other))
    assert other.read_text() == "my notes"
    (tmp_path / "sm").mkdir()
    with pytest.raises(ValueError, match="must not overlap"):
        export.export_text_model(
            attention_model,
            saved_model=str(tmp_path / "sm"),
            onnx=str(tmp_path / "sm" / "m.onnx"),
            overwrite=True,
        )
    assert os.listdir(tmp_path / "sm") == []


@pytest.mark.slow
def test_cli_errors_are_clean_and_leave_nothing(text_model, tmp_path):
    model_path = tmp_path / "model.keras"
    text_model.save(str(model_path))
    truncated = tmp_path / "truncated.keras"
    truncated.write_bytes(model_path.read_bytes()[:2000])
    foreign = tmp_path / "notes.keras"
    foreign.write_text("hello")
    bad_tflite = tmp_path / "bad.tflite"
    bad_tflite.write_bytes(b"\x00" * 64)
    (tmp_path / "vocabulary.txt").write_text("\n[UNK]\na\n")
    cases = [
        ("export", str(truncated), "--saved-model", str(tmp_path / "o1")),
        ("export", str(foreign), "--tflite", str(tmp_path / "o2.tflite")),
        (
            "export",
            str(tmp_path / "missing.keras"),
            "--saved-model",
            str(tmp_path / "o3"),
        ),
        (
            "export",
            str(model_path),
            "--saved-model",
            str(tmp_path / "no" / "such" / "dir"),
        ),
        (
            "export",
            str(model_path),
            "--tflite",
            str(tmp_path / "o4.tflite"),
            "--quantize",
            "int8",
        ),
        ("predict", str(bad_tflite), "hello"),
        ("predict", str(truncated), "hello"),
    ]
    for args in cases:
        proc = run_cli(*args)
        assert proc.returncode == 2, (args, proc.stderr[-1500:])
        assert "keras-attn: error:" in proc.stderr, args
        assert "Traceback" not in proc.stderr, args
    leftovers = {p.name for p in tmp_path.iterdir()}
    assert not leftovers & {"o1", "o2.tflite", "o3", "o4.tflite"}
    assert not [n for n in leftovers if n.startswith(".tmp-export")]


@pytest.mark.slow
def test_litert_runtime_needs_no_tensorflow(attention_model, tmp_path):
    path = str(tmp_path / "m.tflite")
    export.export_text_tflite(attention_model, path)
    want = attention_model.predict(as_batch(TEXTS[:5]), verbose=0)
    script = textwrap.dedent(f"""
        import sys
        for name in ("tensorflow", "keras", "keras_attn"):
            sys.modules[name] = None  # any import of them now fails
        import keras_attn_runtime as rt
        out = rt.LiteRTClassifier({path!r}).predict({TEXTS[:5]!r})
        print(repr(out["probability"][:, 0].tolist()))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = np.array(eval(proc.stdout.strip().splitlines()[-1]))
    np.testing.assert_allclose(got, want["probability"][:, 0], atol=1e-4)


def test_versions_record_what_is_installed(monkeypatch):
    import platform

    from keras_attn.export import versions

    record = versions()
    assert record["keras_attn"] == keras_attn.__version__
    assert record["keras"] == keras.__version__
    assert record["tensorflow"] == tf.__version__
    assert record["python"] == platform.python_version()
    assert f"{os.cpu_count()} CPU cores" in record["machine"]
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # not installed
    assert "tensorflow" not in versions()


def test_int8_calibration_shows_progress_only_when_asked(capsys):
    # `keras-attn export --quantize int8` was silent for a minute.
    from keras_attn.export.text_models import split_text_model

    _, token_model = split_text_model(build_text_model(encoder="attention"))
    rows = np.tile(np.arange(2, 2 + LENGTH, dtype="int32"), (5, 1))
    export.convert_tflite(
        token_model, quantize="int8", representative_data=rows, verbose=True
    )
    shown = capsys.readouterr().out
    assert "5/5" in shown
    export.convert_tflite(
        token_model, quantize="int8", representative_data=rows
    )
    assert "5/5" not in capsys.readouterr().out
