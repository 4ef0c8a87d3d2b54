"""`keras_attn.export.flatbuffer.share_quantization`: tensors with equal
int8 scales point at one stored table, the file shrinks, and LiteRT
computes the same numbers from it; a file with nothing repeated comes
back as it was."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")


def _two_signatures_over_one_dense(path, share):
    import keras

    from keras_attn.export.litert import export_signatures_tflite

    keras.utils.set_random_seed(0)
    dense = keras.layers.Dense(64)
    dense.build((None, 48))
    spec = [tf.TensorSpec([2, 48], tf.float32, "x")]

    @tf.function(input_signature=spec)
    def first(x):
        return {"y": dense(x)}

    @tf.function(input_signature=spec)
    def second(x):
        return {"y": tf.nn.relu(dense(x))}

    export_signatures_tflite(
        {"first": first, "second": second},
        path,
        quantize="dynamic",
        share_weights=share,
    )
    with open(path, "rb") as f:
        return f.read()


def _outputs(data):
    from ai_edge_litert.interpreter import Interpreter

    x = np.random.default_rng(0).normal(size=(2, 48)).astype("float32")
    interpreter = Interpreter(model_content=data)
    return {
        name: interpreter.get_signature_runner(name)(x=x)["y"]
        for name in ("first", "second")
    }


def test_equal_scales_are_stored_once_with_the_same_numbers(tmp_path):
    from keras_attn.export.flatbuffer import share_quantization

    apart = _two_signatures_over_one_dense(str(tmp_path / "a.tflite"), False)
    shared = _two_signatures_over_one_dense(str(tmp_path / "b.tflite"), True)
    rewritten = share_quantization(apart)
    assert len(rewritten) < len(apart)  # 64 scales (and zero points) once
    assert len(shared) < len(apart)
    for name, want in _outputs(apart).items():
        np.testing.assert_array_equal(_outputs(rewritten)[name], want)
        np.testing.assert_array_equal(_outputs(shared)[name], want)
    assert share_quantization(shared) == shared  # nothing left to share
