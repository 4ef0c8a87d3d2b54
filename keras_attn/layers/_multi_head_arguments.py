"""`MultiHeadPositional`'s constructor arguments, declared once, and
their checks."""

import inspect
import textwrap
import typing

import keras

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
    check_rate,
    output_shape_argument,
    positive_int,
    positive_number,
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
