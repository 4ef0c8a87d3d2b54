"""Edge targets: op checks of LiteRT files, the rewrite that drops
Keras's negative-index wrapping, and exported masks that every target
runs (fast tier; the targets themselves run in `test_edge_targets`)."""

import keras
import numpy as np
import pytest

import keras_attn
from keras_attn import export
from keras_attn.export import edge_targets as edge
from keras_attn.export import flatbuffer

pytest.importorskip("ai_edge_litert")


def tiny_model(length=20, vocab=50):
    """Embedding → masked StructuredSelfAttention → Dense, int32 ids."""
    keras.utils.set_random_seed(0)
    tokens = keras.Input((length,), dtype="int32")
    mask = keras.ops.not_equal(tokens, 0)
    x = keras.layers.Embedding(vocab, 8)(tokens)
    m = keras_attn.StructuredSelfAttention(8, 2, 0.1)(x, mask=mask)
    out = keras.layers.Dense(1, activation="sigmoid")(keras.layers.Flatten()(m))
    return keras.Model(tokens, out)


def ids(rows=40, length=20, vocab=50, seed=0):
    rng = np.random.default_rng(seed)
    data = rng.integers(1, vocab, (rows, length)).astype("int32")
    for row, stop in zip(data, rng.integers(3, length, rows), strict=True):
        row[stop:] = 0
    return data


def plain_conversion(model):
    """TensorFlow's converter alone (no rewrite), float32, weights
    frozen into constants as our exports freeze them."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    spec = tf.TensorSpec(model.inputs[0].shape, tf.int32)
    function = tf.function(lambda t: model(t), input_signature=[spec])
    frozen = convert_variables_to_constants_v2(function.get_concrete_function())
    converter = tf.lite.TFLiteConverter.from_concrete_functions([frozen])
    return converter.convert()


def _interpreter(data):
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_content=data)


def run_litert(data, rows):
    interpreter = _interpreter(data)
    interpreter.allocate_tensors()
    (inp,), (out,) = (
        interpreter.get_input_details(),
        interpreter.get_output_details(),
    )
    outputs = []
    for row in np.asarray(rows):
        interpreter.set_tensor(inp["index"], row[None])
        interpreter.invoke()
        outputs.append(interpreter.get_tensor(out["index"]))
    return outputs


def test_keras_embedding_converts_with_a_select_that_tflm_refuses():
    data = plain_conversion(tiny_model())
    pairs, _ = edge.op_signatures(data)
    assert ("SELECT", "INT32") in pairs or ("SELECT_V2", "INT32") in pairs
    assert edge.edge_problems(data, "tflm")


def test_dropping_the_index_wrapping_keeps_the_outputs():
    model = tiny_model()
    before = plain_conversion(model)
    after = flatbuffer.drop_index_wrapping(before)
    pairs = set(edge.op_signatures(after)[0])
    assert not {p for p in pairs if p[0] in ("SELECT", "LESS")}
    assert ("SELECT_V2", "INT32") not in pairs
    assert edge.edge_problems(after, "tflm") == []
    rows = ids(5)
    np.testing.assert_array_equal(
        np.concatenate(run_litert(after, rows)),
        np.concatenate(run_litert(before, rows)),
    )
    assert flatbuffer.drop_index_wrapping(after) == after  # nothing left to do


@pytest.mark.parametrize("quantize", ["none", "int8"])
def test_masked_attention_exports_to_ops_every_target_runs(quantize):
    model = tiny_model()
    data = export.convert_tflite(
        model, quantize=quantize, representative_data=ids()
    )
    for target in edge.TARGETS:
        assert edge.edge_problems(data, target) == [], target
    names = {op for op, _ in edge.op_signatures(data)[0]}
    assert not names & {"REDUCE_MIN", "REDUCE_ANY", "NEG", "SELECT"}


def test_a_short_input_keeps_its_whole_attention_weight_in_int8():
    """Calibrated on rows whose attention is spread over 19 equal tokens
    (weights 1/19), the converter requantized the softmax to the range
    it saw; a one-token row's weight, 1, was clipped to 1/19 there, and
    its pooled vector with it. `keep_probability_ranges` keeps the
    softmax's own [0, 1) grid."""
    keras.utils.set_random_seed(0)
    tokens = keras.Input((20,), dtype="int32")
    x = keras.layers.Embedding(50, 8, embeddings_initializer="ones")(tokens)
    mask = keras.ops.not_equal(tokens, 0)
    m, a = keras_attn.StructuredSelfAttention(8, 1, 0.0)(
        x, mask=mask, return_attention_scores=True
    )
    model = keras.Model(tokens, [keras.layers.Flatten()(m), a])
    full = np.random.default_rng(0).integers(1, 50, (30, 20)).astype("int32")
    full[:, -1] = 0  # padding, as calibration reviews have
    raw = export.convert_tflite(model, quantize="none")  # float32
    data = export.convert_tflite(model, "int8", representative_data=full)
    one = np.zeros((1, 20), "int32")
    one[0, 0] = 7
    # The pooled vector is all ones in float. In int8, 19 weights of 1/19
    # on the softmax's grid of 1/256 sum to 0.965; one weight of 1 is
    # 255/256.
    run = _interpreter(data).get_signature_runner()
    for rows, atol in ((full[:3], 0.04), (one, 0.01)):
        want = keras.ops.convert_to_numpy(model(rows)[0])
        got = [run(tokens=row[None])["output_0"] for row in rows]
        np.testing.assert_allclose(np.concatenate(got), want, atol=atol)
    weight = run(tokens=one)["output_1"][0, 0, 0]
    assert weight > 0.98, weight  # the weight itself (clipped: 0.053)
    names = [op for op, _ in edge.op_signatures(data)[0]]
    assert "SOFTMAX" in names and "QUANTIZE" not in names, names
    assert flatbuffer.keep_probability_ranges(data) == data  # nothing left
    assert flatbuffer.keep_probability_ranges(raw) == raw  # float: untouched


def test_masked_softmax_floor_is_the_minimum_exactly():
    # `−max(−x)` by products with −1: the float outputs are those of the
    # minimum, bit for bit.
    from keras_attn.ops import masking

    rng = np.random.default_rng(1)
    scores = rng.normal(size=(3, 4, 9)).astype("float32") * 30
    mask = rng.random((3, 4, 9)) > 0.4
    got = keras.ops.convert_to_numpy(masking.masked_softmax(scores, mask))
    floor = scores.min(-1, keepdims=True) - masking.MASK_MARGIN
    work = np.where(mask, scores, floor)
    e = np.exp(work - work.max(-1, keepdims=True))
    want = np.where(mask, e / e.sum(-1, keepdims=True), 0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_edge_problems_name_op_and_type_and_refuse_unknown_targets():
    data = plain_conversion(tiny_model())
    with pytest.raises(
        ValueError, match="target to be one of.*Received: target='int8_npu'"
    ):
        edge.edge_problems(data, "int8_npu")
    with pytest.raises(ValueError, match="tflm: SELECT"):
        edge.check_edge_targets(data, ["tflm"])


def test_micro_op_resolver_lists_each_builtin_once():
    data = export.convert_tflite(
        tiny_model(), quantize="int8", representative_data=ids()
    )
    calls = edge.micro_op_resolver(data)
    assert calls == sorted(set(calls))
    assert "AddFullyConnected()" in calls and "AddSoftmax()" in calls
    assert all(c.startswith("Add") and c.endswith("()") for c in calls)
