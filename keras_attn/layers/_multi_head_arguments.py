"""Checks of `MultiHeadPositional`'s arguments, inputs and output specs."""

import inspect
import textwrap
import typing

import keras
from keras import ops

from keras_attn.layers import cache_policies
from keras_attn.layers.alibi_bias import AlibiBias
from keras_attn.layers.learned_position_embedding import (
    LearnedPositionEmbedding,
)
from keras_attn.layers.rotary_embedding import RotaryEmbedding
from keras_attn.layers.sinusoidal_position_encoding import (
    SinusoidalPositionEncoding,
)
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
FEED_FORWARDS = (None, "concat", "per_head")
REQUIRED = inspect.Parameter.empty
# Each position is a layer that says where `MultiHeadPositional` applies
# it (`attention_role`) and builds itself from the layer's settings
# (`for_attention`): "inputs" (an encoding added to the inputs), "heads"
# (the projected queries and keys turned) or "scores" (a bias).
POSITION_LAYERS = {
    "sinusoidal": SinusoidalPositionEncoding,
    "learned": LearnedPositionEmbedding,
    "rotary": RotaryEmbedding,
    "alibi": AlibiBias,
}
ADDED = tuple(
    name
    for name, layer in POSITION_LAYERS.items()
    if layer.attention_role == "inputs"
)


class Argument(typing.NamedTuple):
    """One constructor argument of `MultiHeadPositional`, declared once:
    the signature, the docstring's `Args:`, the stored attribute and the
    config all read it. `doc=None`: one of Keras's, described under
    `**kwargs`. `keras=True`: passed on to `MultiHeadAttention`."""

    name: str
    default: object = REQUIRED
    doc: str = None
    keras: bool = False
    convert: typing.Callable = None  # given value -> stored attribute
    serialize: typing.Callable = None  # stored attribute -> config value


ARGUMENTS = (
    Argument("num_heads", doc="number of heads `H`.", keras=True),
    Argument("key_dim", doc="size of each query/key head.", keras=True),
    Argument(
        "value_dim",
        None,
        "size of each value head. Defaults to `key_dim`.",
        keras=True,
    ),
    Argument(
        "position",
        "sinusoidal",
        '`"sinusoidal"`, `"learned"`, `"rotary"`, `"alibi"` or `None`. '
        'Defaults to `"sinusoidal"`.',
    ),
    Argument(
        "max_length",
        None,
        'table size for `position="learned"` (required then). '
        "Defaults to `None`.",
    ),
    Argument(
        "num_key_value_heads",
        None,
        "key/value heads; divides `num_heads`. Defaults to `num_heads`.",
    ),
    Argument(
        "max_wavelength",
        10000.0,
        "the largest wavelength of rotary angles. Defaults to `10000`.",
        convert=float,
    ),
    Argument(
        "scaling_factor",
        1.0,
        "rotary positions are divided by it. Defaults to `1`.",
        convert=float,
    ),
    Argument(
        "feed_forward",
        None,
        '`None`, `"concat"` or `"per_head"`. Defaults to `None`.',
    ),
    Argument(
        "feed_forward_dim",
        None,
        "hidden width of `g`. Defaults to twice the input width of `g`.",
    ),
    Argument(
        "feed_forward_activation",
        "relu",
        'activation of `g`. Defaults to `"relu"`.',
        convert=keras.activations.get,
        serialize=keras.activations.serialize,
    ),
    Argument("dropout", 0.0, keras=True),
    Argument(
        "output_dim",
        None,
        "output width; the same as `output_shape=output_dim`. Defaults to "
        "`None` (the query's width).",
    ),
    Argument("output_shape", None, keras=True),
    Argument(
        "cache_policy",
        None,
        "what a decoding cache keeps: `SlidingWindowCache`, `SinkCache` or "
        "`Int8Cache` (`keras_attn.layers.cache_policies`). Defaults to "
        "`None` (every position, as a float `(B, 2, T, H_kv, key_dim)` "
        "tensor).",
        convert=cache_policies.get,
        serialize=cache_policies.serialize,
    ),
    Argument("attention_axes", None, keras=True),
    Argument("sliding_window", None, keras=True),
)
OWN = tuple(a for a in ARGUMENTS if not a.keras)
KWARGS_DOC = (
    "the other arguments of `keras.layers.MultiHeadAttention` "
    "(`dropout`, `use_bias`, `output_shape`, `attention_axes`, "
    "`sliding_window`, `flash_attention`, `use_gate`, `seed`, the "
    "initializers, regularizers and constraints) and of the base layer. "
    "Positions need a single attention axis."
)
SIGNATURE = inspect.Signature(
    [
        inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        *(
            inspect.Parameter(
                a.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=a.default,
            )
            for a in ARGUMENTS
        ),
        inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
    ]
)


def args_doc(indent=8):
    """The docstring's `Args:` entries, from `ARGUMENTS`."""

    def entry(name, doc):
        return textwrap.fill(
            f"{name}: {doc}",
            width=79,
            initial_indent=" " * indent,
            subsequent_indent=" " * (indent + 4),
        )

    lines = [entry(a.name, a.doc) for a in ARGUMENTS if a.doc]
    return "\n".join([*lines, entry("**kwargs", KWARGS_DOC)]).lstrip()


def bind(layer, args, kwargs):
    """`(given, rest)`: every declared argument by name (defaults filled
    in) and the other keyword arguments, for Keras, as Python binds a
    call to `SIGNATURE` (a missing, doubled or extra positional argument
    is Python\'s `TypeError`)."""
    bound = SIGNATURE.bind(layer, *args, **kwargs)
    bound.apply_defaults()
    given = dict(bound.arguments)
    del given["self"]
    return given, given.pop("kwargs")


def resolve(given):
    """Raise, naming the argument, on a bad constructor argument; return
    `(for_keras, own)`: `MultiHeadAttention`\'s arguments (output shape
    and axes resolved) and ours (as the layer stores them)."""
    check_arguments(given)
    given = dict(given)
    given["num_key_value_heads"] = (
        given["num_key_value_heads"] or given["num_heads"]
    )
    given["output_shape"] = output_shape_argument(
        given["output_shape"], given["output_dim"]
    )
    given["attention_axes"] = axes_argument(given["attention_axes"])
    for_keras = {a.name: given[a.name] for a in ARGUMENTS if a.keras}
    own = {a.name: (a.convert or (lambda v: v))(given[a.name]) for a in OWN}
    return for_keras, own


def own_config(layer):
    """Our arguments\' entries of `layer.get_config()`."""
    return {
        a.name: (a.serialize or (lambda v: v))(getattr(layer, a.name))
        for a in OWN
    }


def check_arguments(given):
    """Raise, naming the argument, on a bad constructor argument
    (`given`: every declared argument by name)."""
    positive_int("num_heads", given["num_heads"])
    positive_int("key_dim", given["key_dim"])
    for name in (
        "value_dim",
        "feed_forward_dim",
        "sliding_window",
        "output_dim",
        "num_key_value_heads",
    ):
        positive_int(name, given[name], allow_none=True)
    heads, position = given["num_heads"], given["position"]
    kv_heads = given["num_key_value_heads"] or heads
    if heads % kv_heads:
        raise ValueError(
            "Expected num_key_value_heads to divide num_heads. Received: "
            f"num_heads={heads}, num_key_value_heads={kv_heads}"
        )
    if position == "rotary" and given["key_dim"] % 2:
        raise ValueError(
            "Rotary positions turn pairs of features: key_dim must be "
            f"even. Received: key_dim={given['key_dim']}"
        )
    positive_number("max_wavelength", given["max_wavelength"])
    positive_number("scaling_factor", given["scaling_factor"])
    for name, allowed in (
        ("position", POSITIONS),
        ("feed_forward", FEED_FORWARDS),
    ):
        if given[name] not in allowed:
            raise ValueError(
                f"Expected {name} to be one of {allowed}. "
                f"Received: {name}={given[name]!r}"
            )
    positive_int("max_length", given["max_length"], position != "learned")
    check_rate("dropout", given["dropout"])
    policy = cache_policies.get(given["cache_policy"])
    window = given["sliding_window"]
    if policy is not None and window and policy.window != window:
        raise ValueError(
            "A cache policy's window is the layer's sliding window. "
            f"Received: sliding_window={window}, cache_policy={policy!r}"
        )
    output_shape_argument(given["output_shape"], given["output_dim"])
    axes = axes_argument(given["attention_axes"])
    if position is not None and axes and len(axes) > 1:
        raise ValueError(
            "Positions run along one axis: give a single attention axis "
            f"or position=None. Received: attention_axes={axes}"
            f", position={position!r}"
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
