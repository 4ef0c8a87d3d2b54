"""The layers' names and files of earlier keras_attn versions, still
read (removed in 1.0, `keras_attn.legacy.REMOVALS`).

keras_attn 0.1's attention layers held their projection weights
themselves (`query_kernel`, ...), and 0.2 exposed Keras's private
settings of `MultiHeadPositional` under public names (`flash_attention`,
...). Both stay as read-only views, and 0.1 `.keras` files (whose store
lists the weights in `get_weights()` order) still load.
"""

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


def skip_next_load(layer):
    """Make `layer.load_own_variables` a no-op once."""

    def skip(store):
        del layer.load_own_variables  # back to the class's method

    layer.load_own_variables = skip


def load_own_variables(layer, store, sublayers, load, own=()):
    """`load(store)` for this version's files; for a 0.1 file, whose store
    holds the `sublayers`' variables, then the layer's `own` ones (those
    that are not `None`), in that order, assign them in that order."""
    legacy = [v for sublayer in sublayers for v in sublayer.variables]
    legacy += [v for v in own if v is not None]
    sublayer_count = sum(len(s.variables) for s in sublayers)
    keys = 0 if store is None else len(store.keys())
    if not sublayer_count or keys != len(legacy):
        return load(store)
    for i, variable in enumerate(legacy):
        variable.assign(store[str(i)])
    for sublayer in sublayers:  # their own (absent) entries: skip
        skip_next_load(sublayer)
