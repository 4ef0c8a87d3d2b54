"""Where `MultiHeadPositional`'s positions enter: the position layers it
builds, and the score bias of relative positions over its keys."""

from keras import ops

from keras_attn.layers import _multi_head_arguments as arguments
from keras_attn.ops import positional


def build(layer):
    """The position layer(s), built by their class for this layer
    (`for_attention`). An encoding added to the inputs is one layer
    where it fits any width, else one a distinct input width (one
    for self-attention); one on the heads or scores is one layer,
    named after the position. Returns `{stream: layer}` of those added
    to the inputs."""
    positions = {}
    kind = arguments.POSITION_LAYERS.get(layer.position)
    if kind is None:
        return positions
    if kind.attention_role != "inputs":
        name = layer.position
        setattr(layer, name, kind.for_attention(layer, name))
        return positions
    tables = {}
    for stream in ("query", "value", "key"):
        width = layer._widths[stream]
        if not tables or (not kind.fits_any_width and width not in tables):
            table = kind.for_attention(layer, f"{stream}_position")
            table.build((None, None, width))
            setattr(layer, f"{stream}_position", table)
            tables[width] = table
        positions[stream] = tables.get(width, layer.query_position)
    return positions


def total_bias(layer, q, step, length, attention_bias):
    """`attention_bias` plus `score_bias`'s for queries `q`
    `(B, Tq, H, K)` from position `step.start` over `length` keys at
    positions `0...`, or a cache policy's (any row's)."""
    if len(q.shape) != 4:
        return attention_bias
    queries = positional.step_positions(ops.shape(q)[1], step.start)
    keys = ops.arange(length)
    if step.key_positions is not None:
        keys = ops.max(step.key_positions, axis=0)
    own = layer.score_bias(queries, keys)
    if own is None or attention_bias is None:
        return own if attention_bias is None else attention_bias
    return ops.add(attention_bias, own)
