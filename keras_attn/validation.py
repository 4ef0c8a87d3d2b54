"""Argument and input checks, and small helpers shared by the layers."""


def positive_int(name, value, allow_none=False):
    """Raise a Keras-worded `ValueError` unless `value` is an int > 0."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"Expected argument `{name}` to be a positive integer. "
            f"Received: {name}={value!r}"
        )


def positive_number(name, value):
    """`float(value)`; raise, naming the argument, unless it is a number
    above zero."""
    if isinstance(value, bool) or not (
        isinstance(value, (int, float)) and value > 0
    ):
        raise ValueError(
            f"Expected {name} to be a positive number. "
            f"Received: {name}={value!r}"
        )
    return float(value)


def check_rate(name, value):
    """Raise unless `value` is a rate in [0, 1)."""
    if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(
            f"Expected {name} to be a float in [0, 1). "
            f"Received: {name}={value!r}"
        )


def check_batch(query, value, key):
    """Raise a clear error when static batch sizes disagree."""
    sizes = {"query": query.shape[0], "value": value.shape[0]}
    sizes["key"] = key.shape[0]
    known = {k: v for k, v in sizes.items() if v is not None}
    if len(set(known.values())) > 1:
        raise ValueError(
            "Expected query, value and key to have the same batch size. "
            f"Received: batch sizes {known}"
        )


def check_key_value(value_shape, key_shape):
    """Raise (in Keras's words) unless key and value agree on every axis
    but the last: each key scores the value row at the same position."""
    value_shape, key_shape = tuple(value_shape), tuple(key_shape)
    ok = len(value_shape) == len(key_shape) and all(
        v is None or k is None or v == k
        for v, k in zip(value_shape[1:-1], key_shape[1:-1], strict=True)
    )
    if not ok:
        raise ValueError(
            "All dimensions of `value` and `key`, except the last one, must "
            f"be equal. Received: value_shape={value_shape} and "
            f"key_shape={key_shape}"
        )


def set_output_mask(output, query_mask):
    """Carry an explicitly given query mask to the output's Keras mask,
    as `keras.layers.Attention` and `MultiHeadAttention` do (eager JAX
    arrays take no attributes: nothing to carry there)."""
    if query_mask is None:
        return output
    try:
        output._keras_mask = query_mask
    except AttributeError:
        pass
    return output


def clone_initializer(initializer):
    """A fresh copy, so that two weights never share one seeded instance."""
    return initializer.__class__.from_config(initializer.get_config())


def check_mask(name, mask, expected):
    """Raise when a mask's static shape cannot match `expected`.

    `expected` holds the sizes the mask must have (`None` where unknown),
    e.g. `(B, Tv)` for a value mask. Any dtype is accepted: non-zero means
    "keep", as with `keras.layers.MultiHeadAttention`.
    """
    if mask is None:
        return
    shape = tuple(getattr(mask, "shape", ()))
    ok = len(shape) == len(expected) and all(
        got is None or want is None or got == want or got == 1
        for got, want in zip(shape, expected, strict=True)
    )
    if not ok:
        want = tuple("?" if w is None else w for w in expected)
        raise ValueError(
            f"Expected {name} of shape {want} (batch, then the lengths it "
            f"masks). Received: {name}.shape={shape}"
        )


def check_attention_masks(
    query,
    key,
    query_mask=None,
    value_mask=None,
    attention_mask=None,
    num_heads=None,
):
    """Static shape checks of the masks given to an attention layer.

    `attention_mask` may be `(Tq, Tv)` (the same for every example),
    `(B, Tq, Tv)`, or with `num_heads`, per head `(B, H, Tq, Tv)`.
    """
    b, tq, tv = query.shape[0], query.shape[1], key.shape[1]
    check_mask("query_mask", query_mask, (b, tq))
    check_mask("value_mask", value_mask, (b, tv))
    rank = len(getattr(attention_mask, "shape", ()))
    if attention_mask is not None and rank == 2:
        check_mask("attention_mask", attention_mask, (tq, tv))
    elif attention_mask is not None and rank == 4 and num_heads:
        check_mask("attention_mask", attention_mask, (b, num_heads, tq, tv))
    else:
        check_mask("attention_mask", attention_mask, (b, tq, tv))


def check_features(widths, **tensors):
    """Raise when an input's rank or width differs from what was built.

    `widths` maps an argument name to the last dimension the layer's
    weights were built for (`build()` records it).
    """
    for name, tensor in tensors.items():
        if tensor is None or name not in widths:
            continue
        shape = tuple(tensor.shape)
        if len(shape) != 3 or shape[-1] not in (None, widths[name]):
            raise ValueError(
                f"Expected {name} of shape (batch, time, {widths[name]}): "
                "the layer was built for that width. "
                f"Received: {name}.shape={shape}"
            )


def output_shape_argument(output_shape, output_dim):
    if output_shape is None:
        return (output_dim,) if output_dim else None
    dims = (
        tuple(output_shape)
        if isinstance(output_shape, (tuple, list))
        else (output_shape,)
    )
    if not dims or any(
        isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in dims
    ):
        raise ValueError(
            "Invalid `output_shape`: expected a positive integer or a tuple "
            f"of them. Received: output_shape={output_shape!r}"
        )
    if output_dim is not None:
        raise ValueError(
            "Give output_dim or output_shape, not both. Received: "
            f"output_dim={output_dim}, output_shape={output_shape!r}"
        )
    return dims


def axes_argument(attention_axes):
    """`attention_axes` as a tuple of ints (or `None`), checked."""
    if attention_axes is None:
        return None
    axes = (
        (attention_axes,)
        if isinstance(attention_axes, int)
        else tuple(attention_axes)
    )
    if not axes or any(
        isinstance(a, bool) or not isinstance(a, int) or a == 0 for a in axes
    ):
        raise ValueError(
            "Expected attention_axes to be a non-zero int or a tuple of "
            f"them (axis 0 is the batch). Received: "
            f"attention_axes={attention_axes!r}"
        )
    return axes
