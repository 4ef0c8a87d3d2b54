"""The attention side of `AttentionDecoder`: one mechanism or several
(tfa's list: one memory each, contexts concatenated)."""

import keras
from keras import layers, ops

from keras_attn.layers.attention import Attention
from keras_attn.seq2seq.monotonic import MonotonicAttention
from keras_attn.validation import positive_int

ORDERS = ("luong", "bahdanau")


def check_arguments(cell, attention_order, attentional_units, attention_layer):
    """Raise, naming the argument, on a bad `AttentionDecoder` argument;
    return `(cell, attention_layer)` deserialized."""
    if isinstance(cell, dict):
        cell = layers.deserialize(cell)
    if not hasattr(cell, "state_size") or not callable(cell):
        raise ValueError(
            "Expected cell to be a Keras RNN cell (with `state_size`). "
            f"Received: cell={cell!r}"
        )
    for name in ("dropout", "recurrent_dropout"):
        if getattr(cell, name, 0):
            raise ValueError(
                f"Expected the cell's {name} to be 0 (put dropout around "
                f"the decoder). Received: cell.{name}="
                f"{getattr(cell, name)!r}"
            )
    if attention_order not in ORDERS:
        raise ValueError(
            f"Expected attention_order to be one of {ORDERS}. "
            f"Received: attention_order={attention_order!r}"
        )
    positive_int("attentional_units", attentional_units, allow_none=True)
    if isinstance(attention_layer, dict):
        attention_layer = layers.deserialize(attention_layer)
    if attention_layer is not None and (
        attentional_units or not isinstance(attention_layer, layers.Layer)
    ):
        raise ValueError(
            "Expected attention_layer to be a Keras layer, given without "
            "attentional_units. Received: attention_layer="
            f"{attention_layer!r}, attentional_units={attentional_units!r}"
        )
    return cell, attention_layer


def output_size(attentional_units, attentional_layer, width):
    """The decoder's output width for `[cell output; contexts]` of
    `width`: the attentional layer's, else `width`."""
    if attentional_units:
        return attentional_units
    if attentional_layer is not None:
        return attentional_layer.compute_output_shape((None, width))[-1]
    return width


def each(fn, x):
    """`fn` on `x`, or on each item of a list `x` (several memories)."""
    return [fn(v) for v in x] if isinstance(x, (list, tuple)) else fn(x)


def attend_one(attention, query, memory, memory_mask, training, keys=None):
    extra = {} if keys is None else {"projected_key": keys}
    context, weights = attention(
        query[:, None, :],
        memory,
        value_mask=memory_mask,
        return_attention_scores=True,
        training=training,
        **extra,
    )  # (B, 1, D), (B, 1, S)
    return context[:, 0], weights[:, 0]


def attend_sequence(mechanisms, queries, memories, masks, query_mask, training):
    """All steps' queries `(B, T, U)` at once: the contexts concatenated
    `(B, T, ΣD)` and each mechanism's alignments `(B, T, S)`."""
    masks = masks or [None] * len(memories)
    pairs = [
        m(
            queries,
            h,
            query_mask=query_mask,
            value_mask=k,
            return_attention_scores=True,
            training=training,
        )
        for m, h, k in zip(mechanisms, memories, masks, strict=True)
    ]
    return ops.concatenate([c for c, _ in pairs], axis=-1), [
        w for _, w in pairs
    ]


def one_mechanism(options, mechanisms, monotonic, sigmoid_noise, bias_init):
    """`AttentionDecoder`'s attention layer for one memory, from the
    `Attention` keyword `options`: monotonic when `monotonic` names a
    mode; `None` with `mechanisms` (one `Attention` per memory instead)."""
    if mechanisms is not None:
        return None
    if monotonic is None:
        return Attention(**options)
    return MonotonicAttention(
        mode=monotonic,
        sigmoid_noise=sigmoid_noise,
        score_bias_init=bias_init,
        **options,
    )


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


def output_spec(decoder, inputs, memory):
    """`AttentionDecoder.compute_output_spec`: outputs, alignments (one
    per memory with several mechanisms) and states."""
    batch, steps = inputs.shape[0], inputs.shape[1]
    memories = memory if decoder.mechanisms is not None else [memory]
    cell_units = decoder.cell.output_size
    width = sum(m.shape[-1] for m in memories)
    size = output_size(
        decoder.attentional_units, decoder.attentional_layer, width + cell_units
    )
    dtype = decoder.compute_dtype
    sizes = decoder.cell.state_size
    sizes = list(sizes) if isinstance(sizes, (list, tuple)) else [sizes]
    if decoder.input_feeding:
        sizes.append(size)
    if decoder.monotonic is not None:
        sizes.append(memory.shape[1])
    aligned = [
        keras.KerasTensor((batch, steps, m.shape[1]), dtype=dtype)
        for m in memories
    ]
    return (
        keras.KerasTensor((batch, steps, size), dtype=dtype),
        aligned if decoder.mechanisms is not None else aligned[0],
        [keras.KerasTensor((batch, s), dtype=dtype) for s in sizes],
    )
