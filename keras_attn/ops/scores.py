"""Attention score functions (CS224N lecture notes; Luong et al. 2015).

Each function maps queries `s` of shape `(B, Tq, Dq)` and keys `h` of shape
`(B, Tk, Dk)` to unnormalized scores `e` of shape `(B, Tq, Tk)`. Weights are
passed in by the calling layer, which owns them. `keras.ops` only.
"""

import math

import keras
from keras import ops

SCORES = ("dot", "scaled_dot", "general", "low_rank", "additive", "concat")


def dot_score(query, key):
    """`e_ij = s_iᵀ h_j`. float16 inputs are multiplied in float32 (a
    product of inputs near 100 already overflows float16's 65,504) and
    the scores come back in float32; the softmax runs in float32 anyway."""
    half = {keras.backend.standardize_dtype(t.dtype) for t in (query, key)}
    if "float16" in half:
        query, key = ops.cast(query, "float32"), ops.cast(key, "float32")
    return ops.einsum("bqd,bkd->bqk", query, key)  # (B, Tq, Tk)


def scaled_dot_score(query, key):
    """`e_ij = s_iᵀ h_j / sqrt(d)` (Vaswani et al. 2017)."""
    depth = query.shape[-1]
    scale = ops.cast(1.0 / math.sqrt(depth), query.dtype)
    return dot_score(ops.multiply(query, scale), key)  # (B, Tq, Tk)


def general_score(query, key, kernel):
    """Multiplicative score `e_ij = s_iᵀ W h_j`, `kernel = W` of `(Dq, Dk)`."""
    projected = ops.einsum("bqd,de->bqe", query, kernel)  # (B, Tq, Dk)
    return dot_score(projected, key)  # (B, Tq, Tk)


def low_rank_score(query, key, query_kernel, key_kernel):
    """Reduced-rank score `e_ij = (U s_i)ᵀ (V h_j)`.

    `query_kernel = Uᵀ` of shape `(Dq, k)` and `key_kernel = Vᵀ` of shape
    `(Dk, k)`, so `sᵀ Uᵀ V h` with rank `k`.
    """
    us = ops.einsum("bqd,dr->bqr", query, query_kernel)  # (B, Tq, k)
    vh = ops.einsum("bkd,dr->bkr", key, key_kernel)  # (B, Tk, k)
    return dot_score(us, vh)  # (B, Tq, Tk)


def additive_score(
    query,
    key,
    query_kernel,
    key_kernel,
    score_kernel,
    bias=None,
    chunk_size=None,
):
    """Bahdanau score `e_ij = vᵀ tanh(W₁ h_j + W₂ s_i + b)`.

    `key_kernel = W₁ᵀ` `(Dk, U)`, `query_kernel = W₂ᵀ` `(Dq, U)`,
    `score_kernel = v` `(U,)`, optional `bias = b` `(U,)`.

    The hidden tensor is `(B, Tq, Tk, U)`. With `chunk_size`, queries are
    scored `chunk_size` at a time and each chunk is rematerialized in the
    backward pass (`keras.remat`), so at most `(B, chunk_size, Tk, U)` is
    alive at once, in training too. Needs a static query length; the
    result is the same.
    """
    w2s = ops.einsum("bqd,du->bqu", query, query_kernel)  # (B, Tq, U)
    w1h = ops.einsum("bkd,du->bku", key, key_kernel)  # (B, Tk, U)
    return additive_score_of_projections(
        w2s, w1h, score_kernel, bias, chunk_size
    )


def additive_score_of_projections(
    w2s, w1h, score_kernel, bias=None, chunk_size=None
):
    """`additive_score` from the projections `W₂ s` `(B, Tq, U)` and
    `W₁ h` `(B, Tk, U)`, already computed."""
    if bias is not None:
        w1h = w1h + bias
    # A computed tensor, not the variable itself: TF's recompute_grad (under
    # keras.remat) would count a variable passed in as an argument twice.
    v = ops.multiply(score_kernel, 1)  # (U,)
    length = w2s.shape[1]
    if chunk_size is None or length is None or length <= chunk_size:
        return _additive_block(w2s, w1h, v)
    block = keras.remat(_additive_block)
    parts = [
        block(w2s[:, i : i + chunk_size], w1h, v)
        for i in range(0, length, chunk_size)
    ]  # each (B, chunk, Tk)
    return ops.concatenate(parts, axis=1)  # (B, Tq, Tk)


def tanh(x):
    """`ops.tanh`, except float64 on JAX: Keras 3.15 computes that in
    float32 (its result type of float64 and a Python float is float32),
    so it is `2 σ(2x) − 1` there, which stays float64."""
    if (
        keras.backend.backend() == "jax"
        and keras.backend.standardize_dtype(x.dtype) == "float64"
    ):
        return 2.0 * ops.sigmoid(2.0 * x) - 1.0
    return ops.tanh(x)


def _additive_block(w2s, w1h, v):
    hidden = w2s[:, :, None, :] + w1h[:, None, :, :]  # (B, Tq, Tk, U)
    return ops.einsum("bqku,u->bqk", tanh(hidden), v)


def concat_score(query, key, weight=None, scale=None):
    """Keras's parameter-free "concat" score,
    `e_ij = c Σ_d tanh(σ (s_i + h_j))_d` (`Dq == Dk`), with scalars
    `weight = c` and `scale = σ` (1 when `None`). Materializes
    `(B, Tq, Tk, D)`."""
    summed = query[:, :, None, :] + key[:, None, :, :]  # (B, Tq, Tk, D)
    if scale is not None:
        summed = summed * ops.cast(scale, summed.dtype)
    out = ops.sum(ops.tanh(summed), axis=-1)  # (B, Tq, Tk)
    if weight is not None:
        out = out * ops.cast(weight, out.dtype)
    return out
