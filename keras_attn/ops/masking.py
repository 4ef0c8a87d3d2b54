"""Pure mask helpers shared by every layer.

All functions take and return backend tensors and use `keras.ops` only.
Boolean masks use `True` for "attend / keep" and `False` for "ignore".
"""

import keras
from keras import ops

from keras_attn.ops import positional

# How far below a slice's smallest logit masked logits are put (see
# `masked_softmax`): e^-32 ≈ 1.3e-14, so even a million masked keys add
# less than half a float32 ulp to the softmax's denominator.
MASK_MARGIN = 32.0


def large_negative_number(dtype):
    """A large negative number that does not overflow in `dtype`.

    float16 overflows at -1e9, so we use a fraction of the dtype's own
    minimum, as Keras does.
    """
    dtype = keras.backend.standardize_dtype(dtype)
    if dtype == "float16":
        return -3e4
    if dtype == "bfloat16":
        return -1e30
    return -1e9


def _query_rows(query_length, offset):
    """`i + offset`: `(Tq, 1)`, or `(B, Tq, 1)` for an offset a row
    (`(B,)`, rows at different positions)."""
    rows = ops.arange(query_length)[:, None]
    if positional.per_row(offset):
        return ops.cast(offset, rows.dtype)[:, None, None] + rows
    return rows + offset


def _batched(mask):
    """A `(Tq, Tv)` mask as `(1, Tq, Tv)`; a `(B, Tq, Tv)` one as it is."""
    return mask[None] if len(mask.shape) == 2 else mask


def causal_mask(query_length, value_length, offset=0):
    """Lower-triangular mask: query `i` may attend to keys `j <= i + offset`.

    Returns:
        Boolean tensor of shape `(query_length, value_length)`, or
        `(B, query_length, value_length)` for an offset a row `(B,)`.
    """
    rows = _query_rows(query_length, offset)  # (Tq, 1)
    cols = ops.arange(value_length)[None, :]  # (1, Tv)
    return ops.greater_equal(rows, cols)  # (Tq, Tv)


def band_mask(query_length, value_length, width, offset=0):
    """Sliding window: query `i` may attend to keys `j` with
    `|i + offset - j| < width` (Keras's `sliding_window` band).

    Returns:
        Boolean tensor of shape `(query_length, value_length)` (or
        `(B, ...)` for an offset a row).
    """
    rows = _query_rows(query_length, offset)  # (Tq, 1)
    cols = ops.arange(value_length)[None, :]  # (1, Tv)
    return ops.less(ops.abs(rows - cols), width)  # (Tq, Tv)


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
    half = keras.backend.standardize_dtype(dtype) in ("float16", "bfloat16")
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
        # The minimum as `−max(−x)`, negating by products with −1 (the
        # same float exactly): NPU compilers run a max and a product,
        # where some run neither a min nor a negation.
        flipped = ops.max(ops.multiply(work, -1.0), axis=axis, keepdims=True)
        lowest = ops.multiply(flipped, -1.0)
        floor = ops.stop_gradient(lowest)
        work = ops.where(mask, work, floor - MASK_MARGIN)
        weights = ops.softmax(work, axis=axis)
        weights = ops.where(mask, weights, ops.zeros_like(weights))
    return ops.cast(weights, dtype) if half else weights


def any_valid(mask, axis=-1):
    """True where at least one position along `axis` is unmasked.

    A max of the mask as 0/1 floats rather than `ops.any`: the same
    booleans, and ops that microcontrollers and NPU compilers run
    (LiteRT's `REDUCE_ANY` is in neither TFLM nor Intel's NPU plugin; an
    integer max is not in TFLM)."""
    return ops.max(ops.cast(ops.cast(mask, "bool"), "float32"), axis=axis) > 0


def select(x, mask):
    """`x` with masked (padding) steps set to zero by selection, so that
    NaN or inf there cannot reach a valid output (`0 * nan` is nan)."""
    if mask is None:
        return x
    keep = ops.cast(mask, "bool")
    while len(keep.shape) < len(x.shape):
        keep = keep[..., None]
    return ops.where(keep, x, ops.zeros_like(x))


def lean_masks(query_mask, value_mask):
    """`(mask (B, 1, 1, Tv) or None, rows (B, Tq) or None)` for causal
    self-attention with padding: query `t` has a key when some key
    `j <= t` is unmasked."""
    if value_mask is None:
        return None, query_mask
    keys = ops.cast(value_mask, "bool")
    # A float cumulative sum (exact for 0/1 below 2^24 keys): TFLM's
    # CUMSUM has no int32 kernel.
    rows = ops.cumsum(ops.cast(keys, "float32"), axis=1) > 0  # (B, Tv)
    if query_mask is not None:
        rows = ops.logical_and(rows, ops.cast(query_mask, "bool"))
    return keys[:, None, None, :], rows


def zero_rows(output, rows):
    """Zeros for the queries with no key (our guarantee)."""
    if rows is None:
        return output
    rank = len(rows.shape)
    rows = ops.broadcast_to(ops.cast(rows, "bool"), ops.shape(output)[:rank])
    for _ in range(len(output.shape) - rank):
        rows = rows[..., None]
    return ops.where(rows, output, ops.zeros_like(output))


def written_mask(query_mask, length, offset):
    """`(B, length)`: the query mask of the new steps written at `offset`
    (or at an offset a row, `(B,)`) into an all-valid key mask of the
    cache's length."""
    if positional.per_row(offset):
        steps = ops.shape(query_mask)[1]
        at = positional.step_positions(steps, offset)  # (B, Tq)
        hot = ops.one_hot(at, length, dtype="int32")  # (B, Tq, length)
        padded = 1 - ops.cast(ops.cast(query_mask, "bool"), "int32")
        return ops.sum(hot * padded[..., None], axis=1) == 0
    batch = ops.shape(query_mask)[0]
    keys = ops.ones((batch, length), "int32")
    new = ops.cast(ops.cast(query_mask, "bool"), "int32")
    return ops.cast(ops.slice_update(keys, (0, offset), new), "bool")


def full_mask(
    query_length,
    value_length,
    query_mask=None,
    value_mask=None,
    key_mask=None,
    attention_mask=None,
    use_causal_mask=False,
    sliding_window=None,
    offset=None,
):
    """Every mask of a `(B, Tq, D)` attention call merged as Keras merges
    them: `(B|1, Tq, Tv)`, or `(B|1, H, Tq, Tv)` with a per-head
    `attention_mask`; `None` when nothing is masked. With a self-attention
    cache (`offset`, the index of the first query step), keys after the
    written ones are masked, and the causal mask and the sliding window
    (Keras's band, `|i − j| < sliding_window`) are shifted by `offset`."""
    start = 0 if offset is None else offset
    merged = None
    if use_causal_mask:
        merged = _batched(causal_mask(query_length, value_length, start))
    if offset is not None:  # the written keys only
        last = offset + query_length - 1
        written = _batched(causal_mask(1, value_length, last))
        merged = written if merged is None else merged & written
    if sliding_window:
        band = band_mask(query_length, value_length, sliding_window, start)
        merged = _batched(band) if merged is None else merged & band
    padding = merge_masks(
        query_length, value_length, query_mask=query_mask, value_mask=value_mask
    )
    keys = None if key_mask is None else ops.cast(key_mask, "bool")[:, None]
    for extra in (padding, keys, attention_mask):
        if extra is None:
            continue
        extra = ops.cast(extra, "bool")
        if merged is not None and len(extra.shape) == 4:
            merged = merged[:, None]
        elif merged is not None and len(merged.shape) == 4:
            extra = extra[:, None]
        merged = extra if merged is None else ops.logical_and(merged, extra)
    return merged


def rows_with_a_key(mask, rank, attention_axes):
    """`(B|1, d_1, ..., d_n)` (`rank` axes, the query's without its
    features): the queries with a key in some head, from a merged mask
    over `attention_axes`; `None` where it cannot tell."""
    if mask is None:
        return None
    n = len(attention_axes)
    rows = any_valid(mask, axis=tuple(range(-n, 0)))
    if len(rows.shape) > rank and len(mask.shape) == 4:
        rows = any_valid(rows, axis=1)  # per-head masks (3-D inputs)
    if len(rows.shape) != rank:
        return None
    free = [a for a in range(1, rank) if a not in attention_axes]
    back = [[0, *free, *attention_axes].index(i) for i in range(rank)]
    if back != list(range(rank)):
        rows = ops.transpose(rows, back)
    return rows


def zero_empty_heads(context, mask):
    """`context` `(B, Tq, H, Dv)` with zeros where a per-head mask
    `(B|1, H, Tq, Tv)` leaves a head's query no key (a fused attention op
    gives it the values' average there)."""
    if mask is None or len(mask.shape) != 4 or len(context.shape) != 4:
        return context
    alive = any_valid(mask, axis=-1)  # (B|1, H, Tq)
    alive = ops.transpose(alive, (0, 2, 1))[..., None]
    return ops.where(alive, context, ops.zeros_like(context))


def masked_softmax_over(scores, mask, key_axes):
    """`masked_softmax` over the last `key_axes` axes of `scores` at once
    (several attention axes). `mask` is broadcastable to `scores` once
    given its missing head axis, as Keras's `MultiHeadAttention` masks are:
    `(B, ..., Tq..., Tk...)` for scores `(B, ..., H, Tq..., Tk...)`."""
    for _ in range(len(scores.shape) - len(mask.shape)):
        mask = ops.expand_dims(mask, axis=-2 * key_axes - 1)
    if key_axes == 1:
        return masked_softmax(scores, mask)
    shape = ops.shape(scores)
    flat = (*shape[:-key_axes], -1)
    mask = ops.broadcast_to(mask, shape)
    weights = masked_softmax(ops.reshape(scores, flat), ops.reshape(mask, flat))
    return ops.reshape(weights, shape)
