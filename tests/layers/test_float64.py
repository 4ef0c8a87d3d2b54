"""float64 on every backend: each score of `Attention` in float64 equals a
float64 NumPy reference to 1e-12, and `AttentionDecoder` runs in float64.

Failing first (issue #30): on PyTorch, Keras 3.15's `ops.matmul` of two
float64 tensors returns float32, so the bias-free `Dense` projections of
0.2 made `score="general"` fail with `expected scalar type Double but
found Float` and computed `"low_rank"`/`"additive"` in float32."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn import Attention
from keras_attn.seq2seq import AttentionDecoder

if keras.backend.backend() == "jax":
    import jax

    if not jax.config.jax_enable_x64:
        pytest.skip(
            "JAX computes float64 only with JAX_ENABLE_X64=1",
            allow_module_level=True,
        )

RNG = np.random.default_rng(0)
QUERY = RNG.normal(size=(2, 3, 5))
KEY = RNG.normal(size=(2, 4, 6))


def reference_scores(layer, q, k):
    w = {
        v.path.split("/", 1)[1]: v.numpy().astype("float64")
        for v in layer.weights
    }
    if layer.score == "general":
        return np.einsum("bqd,de,bke->bqk", q, w["query/kernel"], k)
    if layer.score == "low_rank":
        return np.einsum(
            "bqr,bkr->bqk", q @ w["query/kernel"], k @ w["key/kernel"]
        )
    hidden = (q @ w["query/kernel"])[:, :, None] + (k @ w["key/kernel"])[
        :, None
    ]
    if "bias" in w:
        hidden = hidden + w["bias"]
    return np.tanh(hidden) @ w["score_kernel"]


@pytest.mark.parametrize("score", ["general", "low_rank", "additive"])
def test_attention_computes_float64_in_float64(score):
    layer = Attention(score=score, units=4, rank=3, dtype="float64")
    value = RNG.normal(size=(2, 4, 6))
    out, weights = layer(QUERY, value, KEY, return_attention_scores=True)
    assert keras.backend.standardize_dtype(out.dtype) == "float64"
    s = reference_scores(layer, QUERY, KEY)
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    np.testing.assert_allclose(ops.convert_to_numpy(weights), a, atol=1e-12)
    np.testing.assert_allclose(ops.convert_to_numpy(out), a @ value, atol=1e-12)


@pytest.mark.parametrize("score", ["general", "additive"])
def test_attention_decoder_runs_in_float64(score):
    decoder = AttentionDecoder(
        keras.layers.GRUCell(4, dtype="float64"), score=score, dtype="float64"
    )
    inputs = RNG.normal(size=(2, 3, 5))
    memory = RNG.normal(size=(2, 4, 4))
    out, align, _ = decoder(inputs, memory)
    assert keras.backend.standardize_dtype(out.dtype) == "float64"
    assert keras.backend.standardize_dtype(align.dtype) == "float64"
    np.testing.assert_allclose(ops.convert_to_numpy(align).sum(-1), 1.0)
