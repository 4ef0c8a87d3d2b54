"""`AttentionDecoder.call`: a whole target sequence through the decoder
(teacher forcing), scanned a step at a time; in Luong's order without
input feeding the cell alone is scanned and attention runs once over
its outputs."""

from keras import ops

from keras_attn.seq2seq._mechanisms import attend_sequence, each


def decode(decoder, inputs, memory, initial_state, mask, memory_mask, training):
    """`(outputs, alignments, states)` of `decoder` over `inputs`
    `(B, T, E)`; `mask` `(B, T)` marks its steps (padded ones keep the
    states and output zeros)."""
    inputs = ops.cast(inputs, decoder.compute_dtype)
    memory = each(lambda m: ops.cast(m, decoder.compute_dtype), memory)
    batch = ops.shape(inputs)[0]
    states = decoder.full_states(batch, initial_state, memory)
    steps = ops.transpose(inputs, (1, 0, 2))  # (T, B, E)
    if mask is None:
        valid = ops.ones(ops.shape(steps)[:2], "bool")  # (T, B)
    else:
        valid = ops.transpose(ops.cast(mask, "bool"), (1, 0))
    fast = decoder.attention_order == "luong" and not decoder.input_feeding
    fast = fast and decoder.monotonic is None
    size = decoder.cell.output_size if fast else decoder.output_size
    init = (
        states,
        ops.zeros((batch, size), decoder.compute_dtype),
        each(
            lambda m: ops.zeros(
                (batch, ops.shape(m)[1]), decoder.compute_dtype
            ),
            memory,
        ),
    )
    # One scanned tensor: the step's inputs and its mask as a last
    # column (TensorFlow's `scan` cannot check two unknown lengths).
    xs = ops.concatenate(
        [steps, ops.cast(valid, steps.dtype)[..., None]], axis=-1
    )  # (T, B, E + 1)
    one_step = _scan_step(decoder, fast, memory, memory_mask, training)
    (states, _, _), (_, outs, weights) = ops.scan(one_step, init, xs)
    if fast:
        cell_out = ops.transpose(outs, (1, 0, 2))  # (B, T, U)
        outputs, alignments = _attend_after(
            decoder, cell_out, memory, memory_mask, mask, training
        )
    else:
        outputs = ops.transpose(outs, (1, 0, 2))  # (B, T, O)
        alignments = each(
            lambda w: ops.transpose(w, (1, 0, 2)), weights
        )  # (B, T, S)
    return outputs, alignments, list(states)


def _scan_step(decoder, fast, memory, memory_mask, training):
    """The function `ops.scan` runs at each step. Its carry holds the
    states, the step's output and alignments, so that the scanned
    outputs have the carry's structure (TensorFlow's `scan` needs
    that); padded steps keep the old states and output zeros. `fast`:
    the cell alone (Luong order without input feeding), attention
    after the loop."""

    def keep(on, new, old):
        return ops.where(on[:, None], new, old)

    def one_step(carry, x):
        states, _, _ = carry
        x_t, on = x[:, :-1], x[:, -1] > 0.5
        if fast:
            cell_state = states if len(states) > 1 else states[0]
            out, new = decoder.cell(x_t, cell_state, training=training)
            new = list(new) if isinstance(new, (list, tuple)) else [new]
            weights = carry[2]
        else:
            out, new, weights = decoder.step(
                x_t, states, memory, memory_mask, training
            )
        states = [keep(on, n, s) for n, s in zip(new, states, strict=True)]
        out = ops.where(on[:, None], out, ops.zeros_like(out))
        weights = each(
            lambda w: ops.where(on[:, None], w, ops.zeros_like(w)), weights
        )
        carry = (states, out, weights)
        return carry, carry

    return one_step


def _attend_after(decoder, cell_out, memory, memory_mask, mask, training):
    """Luong order without input feeding: attention over the whole
    sequence of cell outputs `(B, T, U)` at once; `(outputs,
    alignments)`, padded steps zero."""
    mechanisms = decoder.mechanisms or [decoder.attention]
    memories, masks = memory, memory_mask
    if decoder.mechanisms is None:
        memories, masks = [memory], [memory_mask]
    context, alignments = attend_sequence(
        mechanisms, cell_out, memories, masks, mask, training
    )
    if decoder.mechanisms is None:
        alignments = alignments[0]
    outputs = decoder._output(context, cell_out)
    if mask is not None:
        outputs = outputs * ops.cast(mask, outputs.dtype)[..., None]
    return outputs, alignments
