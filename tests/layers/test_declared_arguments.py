"""`MultiHeadPositional`'s arguments are declared once: the signature,
the docstring, the stored attributes and the config read one table."""

import inspect

import pytest

from keras_attn.layers import MultiHeadPositional
from keras_attn.layers import _multi_head_arguments as arguments


def test_signature_lists_the_declarations_in_order():
    names = list(inspect.signature(MultiHeadPositional).parameters)
    assert names == [a.name for a in arguments.ARGUMENTS] + ["kwargs"]


def test_positional_arguments_bind_in_the_declared_order():
    layer = MultiHeadPositional(4, 8, None, "rotary", None, 2)
    assert (layer.position, layer.num_key_value_heads) == ("rotary", 2)
    with pytest.raises(TypeError, match="multiple values"):
        MultiHeadPositional(2, 4, key_dim=4)


def test_every_documented_argument_is_in_the_docstring_once():
    doc = MultiHeadPositional.__doc__
    assert "{arguments}" not in doc
    args = doc[doc.index("Args:") : doc.index("Call arguments:")]
    for a in arguments.ARGUMENTS:
        if a.doc:
            assert args.count(f"\n        {a.name}: ") == 1, a.name


def test_own_arguments_round_trip_through_the_config():
    given = dict(
        position="learned",
        max_length=9,
        num_key_value_heads=1,
        max_wavelength=500,
        scaling_factor=2,
        feed_forward="per_head",
        feed_forward_dim=3,
        feed_forward_activation="gelu",
        output_dim=5,
    )
    layer = MultiHeadPositional(2, 4, **given)
    config = layer.get_config()
    for a in arguments.OWN:
        assert a.name in config, a.name
    assert config["feed_forward_activation"] == "gelu"
    assert config["max_wavelength"] == 500.0
    again = MultiHeadPositional.from_config(config).get_config()
    assert again == config


@pytest.mark.parametrize("position", [p for p in arguments.POSITIONS if p])
def test_each_position_is_a_layer_that_says_where_it_acts(position):
    kind = arguments.POSITION_LAYERS[position]
    assert kind.attention_role in ("inputs", "heads", "scores")
    layer = MultiHeadPositional(2, 4, position=position, max_length=8)
    made = kind.for_attention(layer, "p")
    assert isinstance(made, kind) and made.name == "p"
