"""Names and files of earlier keras_attn versions, still read.

keras_attn 0.1's `MultiHeadPositional` held its projection weights itself
(`query_kernel`, ...), and 0.2 exposed Keras's private settings under
public names (`flash_attention`, ...). Both stay as read-only views, and
0.1 `.keras` files (whose store lists the weights in `get_weights()`
order) still load.
"""

from keras_attn.layers import _sublayers

# 0.1 weight name: (sublayer attribute, weight).
MULTI_HEAD_WEIGHTS = {
    f"{stream}_{weight}": (f"{stream}_dense", weight)
    for stream in ("query", "key", "value", "output")
    for weight in ("kernel", "bias")
}
MULTI_HEAD_WEIGHTS.update(
    {
        f"ff_{weight}_{i}": (f"_ff_{i}", weight)
        for i in (1, 2)
        for weight in ("kernel", "bias")
    }
)
# 0.2 public setting: Keras's private attribute.
MULTI_HEAD_SETTINGS = {
    name: f"_{name}"
    for name in ("flash_attention", "sliding_window", "use_gate")
}


def _weight_view(sublayer, weight):
    return property(lambda self: getattr(getattr(self, sublayer), weight))


def _setting_view(attribute):
    return property(lambda self: getattr(self, attribute))


def multi_head_names(cls):
    """Class decorator: the 0.1 weight names and 0.2 setting names as
    read-only properties of `cls`."""
    for name, (sublayer, weight) in MULTI_HEAD_WEIGHTS.items():
        setattr(cls, name, _weight_view(sublayer, weight))
    for name, attribute in MULTI_HEAD_SETTINGS.items():
        setattr(cls, name, _setting_view(attribute))
    return cls


def load_own_variables(layer, store, sublayers, load):
    """`load(store)`, or, for a 0.1 file, the weights assigned in the
    order of `sublayers`' variables."""
    legacy = [v for sublayer in sublayers for v in sublayer.variables]
    _sublayers.load_own_variables(layer, store, legacy, sublayers, load)
