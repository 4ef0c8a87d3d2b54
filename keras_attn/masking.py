"""Pure mask helpers shared by every layer.

All functions take and return backend tensors and use `keras.ops` only.
Boolean masks use `True` for "attend / keep" and `False` for "ignore".
"""

from keras import ops

# How far below a slice's smallest logit masked logits are put (see
# `masked_softmax`): e^-32 ≈ 1.3e-14, so even a million masked keys add
# less than half a float32 ulp to the softmax's denominator.
MASK_MARGIN = 32.0


def large_negative_number(dtype):
    """A large negative number that does not overflow in `dtype`.

    float16 overflows at -1e9, so we use a fraction of the dtype's own
    minimum, as Keras does.
    """
    dtype = str(dtype)
    if dtype == "float16":
        return -3e4
    if dtype == "bfloat16":
        return -1e30
    return -1e9


def causal_mask(query_length, value_length, offset=0):
    """Lower-triangular mask: query `i` may attend to keys `j <= i + offset`.

    Returns:
        Boolean tensor of shape `(query_length, value_length)`.
    """
    rows = ops.arange(query_length)[:, None] + offset  # (Tq, 1)
    cols = ops.arange(value_length)[None, :]  # (1, Tv)
    return ops.greater_equal(rows, cols)  # (Tq, Tv)


def merge_masks(
    query_length,
    value_length,
    query_mask=None,
    value_mask=None,
    attention_mask=None,
    use_causal_mask=False,
):
    """Combine padding, explicit and causal masks into one boolean mask.

    Args:
        query_length: Tq (int or scalar tensor).
        value_length: Tv.
        query_mask: optional `(B, Tq)`; masked queries attend to nothing.
        value_mask: optional `(B, Tv)`; masked keys receive weight 0.
        attention_mask: optional `(B, Tq, Tv)` (or broadcastable).
        use_causal_mask: whether to add the lower-triangular mask.

    Returns:
        `None` when no mask applies, else a boolean tensor broadcastable to
        `(B, Tq, Tv)`.
    """
    mask = None

    def _and(a, b):
        return b if a is None else ops.logical_and(a, b)

    if query_mask is not None:
        mask = _and(mask, ops.cast(query_mask, "bool")[:, :, None])  # (B,Tq,1)
    if value_mask is not None:
        mask = _and(mask, ops.cast(value_mask, "bool")[:, None, :])  # (B,1,Tv)
    if attention_mask is not None:
        mask = _and(mask, ops.cast(attention_mask, "bool"))
    if use_causal_mask:
        mask = _and(mask, causal_mask(query_length, value_length)[None])
    return mask


def masked_softmax(scores, mask=None, axis=-1):
    """Softmax over `axis` where masked positions get weight exactly 0.

    The softmax is computed in float32 when `scores` is float16 or bfloat16,
    then cast back. A slice where every position is masked gives all zeros
    (never NaN), and its gradient is finite (zero).

    Args:
        scores: float tensor.
        mask: optional boolean tensor broadcastable to `scores`.
        axis: the axis to normalize over.
    """
    dtype = scores.dtype
    half = str(dtype) in ("float16", "bfloat16")
    work = ops.cast(scores, "float32") if half else scores
    if mask is None:
        weights = ops.softmax(work, axis=axis)
    else:
        mask = ops.cast(mask, "bool")
        # Masked logits go `MASK_MARGIN` below the slice's smallest logit,
        # not to a huge constant: their softmax terms are still below
        # float32's resolution (`Tv · e^-32` ≪ 1 ulp), and the tensor keeps
        # the scores' own range, so a full-integer (int8) model calibrated
        # on it keeps its resolution instead of spending it on `-1e9`.
        floor = ops.stop_gradient(ops.min(work, axis=axis, keepdims=True))
        work = ops.where(mask, work, floor - MASK_MARGIN)
        weights = ops.softmax(work, axis=axis)
        weights = ops.where(mask, weights, ops.zeros_like(weights))
    return ops.cast(weights, dtype) if half else weights


def any_valid(mask, axis=-1):
    """True where at least one position along `axis` is unmasked."""
    return ops.any(ops.cast(mask, "bool"), axis=axis)
