"""Multi-head attention over `(B, T, H, K)` heads: grouped heads shared
by query heads, and the backend's fused attention with a mask and a
score bias together. `keras.ops` only."""

from keras import ops

from keras_attn.ops import masking


def repeat_heads(x, num_heads):
    """`(B, T, H_kv, K)` → `(B, T, num_heads, K)`: each key/value head
    serves `num_heads / H_kv` query heads in a row (Ainslie et al. 2023)."""
    groups = num_heads // x.shape[-2]
    if groups == 1:
        return x
    # `ops.repeat(x, groups, axis=-2)` as copies side by side in the
    # features, then split into heads: the same values, and ops that
    # TFLM runs (it has no TILE).
    copies = ops.concatenate([x] * groups, axis=-1)  # (B, T, H_kv, G·K)
    steps = x.shape[1] if x.shape[1] is not None else ops.shape(x)[1]
    return ops.reshape(copies, (-1, steps, num_heads, x.shape[-1]))


def fused_attention(query, key, value, mask, bias, causal, flash_attention):
    """`ops.dot_product_attention` of `(B, T, H, K)` heads, the query
    already scaled: `mask` (boolean, broadcastable to `(B, H, Tq, Tk)`,
    or `(B, Tq, Tk)`) and `bias` may both be given (the backends take one
    of them: the mask goes into the bias); `causal` is the op's own
    causal kernel."""
    while mask is not None and len(mask.shape) < 4:
        mask = ops.expand_dims(mask, -3)  # (B, Tq, Tk) → (B, 1, Tq, Tk)
    if bias is not None and mask is not None:
        low = ops.cast(masking.large_negative_number(query.dtype), "float32")
        bias = ops.where(mask, ops.cast(bias, "float32"), low)
        mask = None
    return ops.dot_product_attention(
        query,
        key,
        value,
        bias=None if bias is None else ops.cast(bias, query.dtype),
        mask=mask,
        scale=1.0,
        is_causal=bool(causal),
        flash_attention=flash_attention,
    )
