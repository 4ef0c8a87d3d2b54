"""Checks of `MultiHeadPositional`'s arguments, inputs and output specs."""

import types

import keras
from keras import ops

from keras_attn.validation import (
    axes_argument,
    check_attention_masks,
    check_batch,
    check_key_value,
    check_rate,
    output_shape_argument,
    positive_int,
    positive_number,
    set_output_mask,
)

POSITIONS = ("sinusoidal", "learned", "rotary", "alibi", None)
ADDED = ("sinusoidal", "learned")  # added to the inputs
FEED_FORWARDS = (None, "concat", "per_head")


def check_arguments(
    num_heads,
    key_dim,
    position,
    max_length,
    num_key_value_heads,
    max_wavelength,
    scaling_factor,
    feed_forward,
    dropout,
    output_dim,
    output_shape,
    attention_axes,
    **positive_or_none,
):
    """Raise, naming the argument, on a bad constructor argument; return
    `(num_key_value_heads, output_shape, attention_axes)` resolved.
    `positive_or_none`: the other sizes (`value_dim`, ...)."""
    positive_int("num_heads", num_heads)
    positive_int("key_dim", key_dim)
    sizes = {**positive_or_none, "output_dim": output_dim}
    sizes["num_key_value_heads"] = num_key_value_heads
    for name, value in sizes.items():
        positive_int(name, value, allow_none=True)
    kv_heads = num_key_value_heads or num_heads
    if num_heads % kv_heads:
        raise ValueError(
            "Expected num_key_value_heads to divide num_heads. Received: "
            f"num_heads={num_heads}, num_key_value_heads={kv_heads}"
        )
    if position == "rotary" and key_dim % 2:
        raise ValueError(
            "Rotary positions turn pairs of features: key_dim must be "
            f"even. Received: key_dim={key_dim}"
        )
    positive_number("max_wavelength", max_wavelength)
    positive_number("scaling_factor", scaling_factor)
    for name, value, allowed in (
        ("position", position, POSITIONS),
        ("feed_forward", feed_forward, FEED_FORWARDS),
    ):
        if value not in allowed:
            raise ValueError(
                f"Expected {name} to be one of {allowed}. "
                f"Received: {name}={value!r}"
            )
    positive_int("max_length", max_length, position != "learned")
    check_rate("dropout", dropout)
    output_shape = output_shape_argument(output_shape, output_dim)
    attention_axes = axes_argument(attention_axes)
    if position is not None and attention_axes and len(attention_axes) > 1:
        raise ValueError(
            "Positions run along one axis: give a single attention axis "
            f"or position=None. Received: attention_axes={attention_axes}"
            f", position={position!r}"
        )
    return kv_heads, output_shape, attention_axes


def check_build_shapes(query_shape, value_shape, key_shape):
    """Raise unless each input is `(B, T, D)`-like with known features."""
    check_key_value(value_shape, key_shape)
    for name, shape in (
        ("query", query_shape),
        ("value", value_shape),
        ("key", key_shape),
    ):
        if len(shape) < 3 or shape[-1] is None:
            raise ValueError(
                f"Expected {name} of shape (batch, time, features) (or "
                "(batch, d_1, ..., d_n, features)) with known features. "
                f"Received: {name}.shape={tuple(shape)}"
            )


def check_axes(given_axes, position, rank):
    """The one attention axis positions run along (checked) for inputs
    of `rank`."""
    inner = tuple(range(1, rank - 1))
    resolved = [a + rank if a < 0 else a for a in given_axes or inner]
    if any(a not in inner for a in resolved) or len(set(resolved)) < len(
        resolved
    ):
        raise ValueError(
            f"Expected attention_axes among {inner} (or "
            f"{tuple(a - rank for a in inner)}) for inputs of rank "
            f"{rank}. Received: attention_axes={given_axes!r}"
        )
    if position not in ADDED + (None,) and rank != 3:
        raise ValueError(
            f"position={position!r} needs inputs of shape (batch, time, "
            f"features). Received: inputs of rank {rank}"
        )
    if position is not None and len(resolved) > 1:
        raise ValueError(
            "Positions run along one axis: give a single attention axis "
            f"or position=None. Received: attention_axes={given_axes!r}, "
            f"position={position!r}"
        )
    return resolved[0]


def check_cache_arguments(query, cache, index, start_index):
    """A cache needs `(B, T, D)` queries; an index needs a cache."""
    if cache is not None and len(query.shape) != 3:
        raise ValueError(
            "A cache needs query of shape (batch, time, features). "
            f"Received: query.shape={tuple(query.shape)}"
        )
    if cache is not None:
        return
    for name, given in (
        ("cache_update_index", index),
        ("start_index", start_index),
    ):
        if given is not None:
            raise ValueError(
                f"{name} needs a cache. Received: cache=None, {name}={given!r}"
            )


def check_inputs(layer, query, value, key):
    """Batch sizes, and the rank and widths `layer` was built for;
    `value`/`key` are `None` for a cross-attention memory."""
    check_batch(
        query,
        query if value is None else value,
        query if key is None else key,
    )
    for name, tensor in (("query", query), ("value", value), ("key", key)):
        if tensor is None:
            continue
        want = getattr(layer, "_widths", {}).get(name)
        rank = getattr(layer, "_rank", len(tensor.shape))
        if len(tensor.shape) != rank or tensor.shape[-1] not in (None, want):
            raise ValueError(
                f"Expected {name} of rank {rank} with {want} features: "
                "the layer was built for that shape. Received: "
                f"{name}.shape={tuple(tensor.shape)}"
            )


def output_spec(layer, query, value, return_attention_scores, kwargs):
    """`compute_output_spec`: the output, the cache when one is given,
    and the scores `(B, ..., H, Tq..., Tv...)` when asked."""
    out = keras.KerasTensor(
        layer.compute_output_shape(query.shape), dtype=layer.compute_dtype
    )
    set_output_mask(out, kwargs.get("query_mask"))
    result, cache = [out], kwargs.get("cache")
    if cache is not None:
        result.append(keras.KerasTensor(cache.shape, layer.compute_dtype))
    if return_attention_scores:
        rank = len(query.shape)
        axes = [
            a + rank if a < 0 else a
            for a in (layer._given_axes or range(1, rank - 1))
        ]
        free = [a for a in range(1, rank - 1) if a not in axes]
        keys = [value.shape[i] for i in axes] if cache is None else None
        shape = (
            query.shape[0],
            *(query.shape[i] for i in free),
            layer.num_heads,
            *(query.shape[i] for i in axes),
            *(keys if keys is not None else (cache.shape[2],)),
        )
        result.append(keras.KerasTensor(shape, dtype=layer.compute_dtype))
    return result[0] if len(result) == 1 else tuple(result)


def resolve_inputs(
    layer, query, value, key, query_mask, masks, cache, index, start
):
    """`MultiHeadPositional`'s first step: the inputs cast to `layer`'s
    compute dtype and checked, each with its mask, as a namespace. In
    self-attention the value mask defaults to the query mask; a
    cross-attention memory (a cache with no index) has no inputs."""
    value_mask, key_mask, attention_mask = masks
    memory = cache is not None and index is None
    self_attention = value is None and not memory
    if value is None:
        value = query
        if value_mask is None and cache is None:
            value_mask = query_mask
    if key is None:
        key = value
        if self_attention:
            key_mask = None
    check_key_value(value.shape, key.shape)
    check_cache_arguments(query, cache, index, start)
    dtype = layer.compute_dtype
    query, value, key = (ops.cast(t, dtype) for t in (query, value, key))
    check_inputs(layer, query, *((None, None) if memory else (value, key)))
    three_d = len(query.shape) == 3
    if three_d and cache is None:
        check_attention_masks(
            query,
            key,
            query_mask,
            value_mask,
            attention_mask,
            layer.num_heads,
        )
    if start is None:
        start = 0 if index is None else index
    return types.SimpleNamespace(  # the call's resolved inputs
        query=query,
        value=value,
        key=key,
        query_mask=query_mask,
        value_mask=value_mask,
        key_mask=key_mask,
        attention_mask=attention_mask,
        self_attention=self_attention,
        start=start,
        three_d=three_d,
        cached=cache is not None,
    )
