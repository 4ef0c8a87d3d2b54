"""The attention side of `AttentionDecoder`: one mechanism or several
(tfa's list: one memory each, contexts concatenated)."""

from keras import layers

from keras_attn.layers.attention import Attention
from keras_attn.seq2seq.monotonic import MonotonicAttention


def each(fn, x):
    """`fn` on `x`, or on each item of a list `x` (several memories)."""
    return [fn(v) for v in x] if isinstance(x, (list, tuple)) else fn(x)


def attend_one(attention, query, memory, memory_mask, training):
    context, weights = attention(
        query[:, None, :],
        memory,
        value_mask=memory_mask,
        return_attention_scores=True,
        training=training,
    )  # (B, 1, D), (B, 1, S)
    return context[:, 0], weights[:, 0]


def mechanism_list(mechanisms, monotonic):
    """`mechanisms` as a list of `Attention` layers (or `None`)."""
    if mechanisms is None:
        return None
    found = [
        layers.deserialize(m) if isinstance(m, dict) else m
        for m in (mechanisms if isinstance(mechanisms, (list, tuple)) else [0])
    ]
    if (
        not isinstance(mechanisms, (list, tuple))
        or not found
        or not all(
            isinstance(m, Attention) and not isinstance(m, MonotonicAttention)
            for m in found
        )
        or monotonic is not None
    ):
        raise ValueError(
            "Expected mechanisms to be a non-empty list of keras_attn "
            "`Attention` layers (one per memory; not with monotonic). "
            f"Received: mechanisms={mechanisms!r}, monotonic={monotonic!r}"
        )
    return found


def memory_shapes(memory_shape, mechanisms):
    """The shape of each memory: one, or one per mechanism."""
    if mechanisms is None:
        return [memory_shape]
    shapes = list(memory_shape)
    if not shapes or not isinstance(shapes[0], (list, tuple)):
        shapes = [memory_shape]
    if len(shapes) != len(mechanisms):
        raise ValueError(
            f"Expected one memory per mechanism ({len(mechanisms)}). "
            f"Received: {len(shapes)} memories"
        )
    return shapes
