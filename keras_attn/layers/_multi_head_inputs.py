"""`MultiHeadPositional`'s call: its inputs checked and resolved into a
`Step`, the masks of a step, and the output specs."""

import typing

import keras
from keras import ops

from keras_attn.layers._multi_head_arguments import ADDED
from keras_attn.ops import positional
from keras_attn.validation import (
    check_attention_masks,
    check_batch,
    check_key_value,
    set_output_mask,
)


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


def output_spec(layer, query, value, key, return_attention_scores, kwargs):
    """`compute_output_spec`: the output, the cache when one is given,
    and the scores `(B, ..., H, Tq..., Tv...)` when asked."""
    value = query if value is None else value
    if key is not None:
        check_key_value(value.shape, key.shape)
    out = keras.KerasTensor(
        layer.compute_output_shape(query.shape), dtype=layer.compute_dtype
    )
    set_output_mask(out, kwargs.get("query_mask"))
    result, cache = [out], kwargs.get("cache")
    if cache is not None and layer.cache_policy is not None:
        spec = keras.tree.map_structure(
            lambda c: keras.KerasTensor(c.shape, c.dtype), cache
        )
        result.append(spec)
    elif cache is not None:
        result.append(keras.KerasTensor(cache.shape, layer.compute_dtype))
    if return_attention_scores:
        rank = len(query.shape)
        axes = [
            a + rank if a < 0 else a
            for a in (layer._given_axes or range(1, rank - 1))
        ]
        free = [a for a in range(1, rank - 1) if a not in axes]
        keys = [value.shape[i] for i in axes] if cache is None else None
        if layer.cache_policy is not None and cache is not None:
            n, steps = cache[0].shape[2], query.shape[1]
            ring = layer.cache_policy.window is not None
            keys = [None if ring and steps is None else n + ring * (steps or 0)]
        shape = (
            query.shape[0],
            *(query.shape[i] for i in free),
            layer.num_heads,
            *(query.shape[i] for i in axes),
            *(keys if keys is not None else (cache.shape[2],)),
        )
        result.append(keras.KerasTensor(shape, dtype=layer.compute_dtype))
    return result[0] if len(result) == 1 else tuple(result)


class Step(typing.NamedTuple):
    """A call's resolved inputs, each with its mask (immutable: a step
    that changes one returns a new `Step`, `step._replace(...)`)."""

    query: object
    value: object
    key: object
    query_mask: object
    value_mask: object
    key_mask: object
    attention_mask: object
    self_attention: bool
    start: object  # position of the query's first step
    three_d: bool  # (B, T, D) inputs
    cached: bool  # a cache was given
    key_positions: object = None  # (B, T) through a cache policy


def resolve_inputs(
    layer, query, value, key, query_mask, masks, cache, index, start
):
    """`MultiHeadPositional`'s first step: the inputs cast to `layer`'s
    compute dtype and checked, each with its mask, as a `Step`. In
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
    step = Step(
        query,
        value,
        key,
        query_mask,
        value_mask,
        key_mask,
        attention_mask,
        self_attention,
        start,
        three_d,
        cache is not None,
    )
    if layer.cache_policy is not None and index is not None:
        if positional.per_row(index):
            raise ValueError(
                "A cache_update_index a row (rows at different positions) "
                "needs the full cache; layer "
                f"{layer.name!r} has cache_policy={layer.cache_policy!r}. "
                f"Received: cache_update_index of shape {tuple(index.shape)}"
            )
        check_policy_inputs(step)
    return step


def new_steps_mask(step):
    """In self-attention, the value mask of the query's own steps: the
    value mask (which covers the cache's keys with a cache, so its slice
    at the steps' positions), else the query mask."""
    mask = step.value_mask
    if mask is None:
        return step.query_mask
    steps = ops.shape(step.query)[1]
    if mask.shape[1] is not None and mask.shape[1] == step.query.shape[1]:
        return mask
    if positional.per_row(step.start):
        at = positional.step_positions(steps, step.start)  # (B, T)
        return ops.take_along_axis(mask, at, axis=1)
    return ops.slice(mask, (0, step.start), (ops.shape(mask)[0], steps))


def one_length(step):
    """Whether `step`'s queries and keys are `(B, T, D)` of one length
    (self-attention, or both lengths known and equal)."""
    query, key = step.query, step.key
    return step.three_d and (
        step.self_attention or query.shape[1] == key.shape[1] is not None
    )


def check_policy_inputs(step):
    """A cache policy masks by positions: self-attention only, the new
    steps' padding given as the query mask."""
    given = {
        "value": None if step.self_attention else "a tensor",
        "value_mask": step.value_mask,
        "key_mask": step.key_mask,
        "attention_mask": step.attention_mask,
    }
    given = {k: v for k, v in given.items() if v is not None}
    if given:
        shown = ", ".join(
            f"{k}={getattr(v, 'shape', v)}" for k, v in given.items()
        )
        raise ValueError(
            "A cache policy decodes self-attention and masks by positions: "
            "give the new steps' padding as query_mask (or the layer's "
            f"Keras mask) and nothing else. Received: {shown}"
        )


def check_cacheable(layer):
    """A key/value cache stacks keys and values: heads of one width."""
    if layer.value_dim != layer.key_dim:
        raise ValueError(
            "A key/value cache needs value heads as wide as key heads. "
            f"Received: key_dim={layer.key_dim}, value_dim={layer.value_dim}"
        )


def output_shape(query_shape, value_shape, key_shape, tail):
    """`compute_output_shape`: the query's shape with `tail` (the output
    shape asked, else the query's features) for its features."""
    if value_shape is not None and key_shape is not None:
        check_key_value(value_shape, key_shape)
    return (*query_shape[:-1], *(tail or (query_shape[-1],)))
