"""Mixed precision on long sequences: finite everywhere, close to float32.

Each layer runs under the `mixed_float16` and `mixed_bfloat16` policies
(float16/bfloat16 compute, float32 weights) on sequences of 1,024 steps
with padding and fully masked rows, with the float32 layer's weights.
Stated tolerances (max abs difference from float32, inputs of unit
scale): outputs 2e-2 in float16 and 1e-1 in bfloat16 (8 bits of mantissa);
attention weights 5e-3 and 2e-2, except for the unscaled `"general"` score
(`sᵀWh`, logits of several tens, where a half-precision logit is off by a
few hundredths): 5e-2 for both in float16; in bfloat16 2e-1 for outputs
and 5e-2 for weights.
"""

import keras
import numpy as np
import pytest

import keras_attn
from tests.backend import gradients, to_numpy

T, B, D = 1024, 2, 16
TOL = {"mixed_float16": (2e-2, 5e-3), "mixed_bfloat16": (1e-1, 2e-2)}
RNG = np.random.default_rng(11)
X = RNG.normal(size=(B, T, D)).astype("float32")
MASK = np.ones((B, T), bool)
MASK[0] = False  # a fully masked example
MASK[1, 700:] = False  # padding


def make(kind, dtype):
    if kind == "additive":
        return keras_attn.AdditiveAttention(8, chunk_size=256, dtype=dtype)
    if kind == "general":
        return keras_attn.Attention("general", dtype=dtype)
    if kind == "mhp":
        return keras_attn.MultiHeadPositional(
            2, 8, feed_forward="concat", dtype=dtype
        )
    return keras_attn.StructuredSelfAttention(8, 4, dtype=dtype)


def run(layer, kind, x):
    if kind == "ssa":
        return layer(x, mask=MASK, return_attention_scores=True)
    return layer(
        x, x, query_mask=MASK, value_mask=MASK, return_attention_scores=True
    )


def close(got, want, atol, policy):
    """Within `atol` everywhere; in bfloat16 (8 bits of mantissa), where
    rounding of 1,024-term sums depends on the CPU's kernels (seen: 4 of
    32,768 outputs past 2e-1 on one machine, none on another), at most
    one element in 1,000 may reach 2 x atol, none further."""
    if policy != "mixed_bfloat16":
        np.testing.assert_allclose(got, want, atol=atol)
        return
    err = np.abs(got - want)
    assert np.mean(err > atol) <= 1e-3, np.mean(err > atol)
    np.testing.assert_allclose(got, want, atol=2 * atol)


@pytest.mark.parametrize("policy", sorted(TOL))
@pytest.mark.parametrize("kind", ["additive", "general", "mhp", "ssa"])
def test_long_sequences_in_mixed_precision(kind, policy):
    keras.utils.set_random_seed(5)  # tolerances hold for these weights
    ref = make(kind, "float32")
    want_out, want_w = (to_numpy(t) for t in run(ref, kind, X))
    layer = make(kind, policy)
    run(layer, kind, X)
    layer.set_weights(ref.get_weights())
    out, w = run(layer, kind, X)
    out = to_numpy(keras.ops.cast(out, "float32"))
    w = to_numpy(keras.ops.cast(w, "float32"))
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(w))
    assert np.all(out[0] == 0) and np.all(w[0] == 0)  # fully masked
    out_tol, w_tol = TOL[policy]
    if kind == "general":
        out_tol = 5e-2 if policy == "mixed_float16" else 2e-1
        w_tol = 5e-2
    close(out, want_out, out_tol, policy)
    close(w, want_w, w_tol, policy)
    if kind == "ssa":
        assert np.isfinite(float(layer.losses[0]))

    def loss(xt):
        o, _ = run(layer, kind, xt)
        total = keras.ops.sum(keras.ops.cast(o, "float32"))
        return total + sum(layer.losses) if kind == "ssa" else total

    _, grads = gradients(loss, [X], layer.trainable_weights)
    for g in grads:
        assert np.all(np.isfinite(g))
    assert np.all(grads[0][1, 700:] == 0)  # padding gets no gradient


@pytest.mark.parametrize("score", ["dot", "scaled_dot", "general"])
def test_float16_scores_of_large_inputs_stay_finite(score):
    # 0.2.0 (and Keras's Attention) overflowed float16 before the softmax
    # for inputs around 100.
    x = RNG.uniform(-1e3, 1e3, size=(2, 5, 8)).astype("float32")
    ref = keras_attn.Attention(score, dtype="float32")
    want = to_numpy(ref(x, x))
    layer = keras_attn.Attention(score, dtype="mixed_float16")
    layer(x, x)
    layer.set_weights(ref.get_weights())
    got = to_numpy(keras.ops.cast(layer(x, x), "float32"))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1.0)
