"""Decoding where each step emits a set of labels: tfa's `InferenceSampler`
with a Bernoulli `sample_fn`, for any step-wise decoder."""

import keras
from keras import ops

from keras_attn.seq2seq.search import (
    _alignment_buffer,
    _as_alignment,
    _batch_size,
    _write,
)


def multilabel_search(
    step_fn,
    state,
    start_inputs,
    max_length,
    end_fn=None,
    threshold=None,
    seed=None,
):
    """Multi-label decoding: at each step every label is on or off.

    The decoder reads a vector of labels instead of a token:

        step_fn(inputs (B, V), state, index) -> (logits (B, V), state,
                                                 alignment)

    and each step's labels are drawn independently, label `j` on with
    probability `sigmoid(logits_j)` (tfa's `InferenceSampler` with a
    Bernoulli `sample_fn`, `sample_shape=[V]`); with `threshold`, label
    `j` is on where `sigmoid(logits_j) > threshold` instead, with no
    randomness. The drawn vector is the next step's input (tfa's default
    `next_inputs_fn`). The uniform numbers are drawn before the loop from
    `seed`, so a fixed integer seed gives the same outputs on every call,
    also under `jax.jit`.

    Args:
        step_fn: the decoder (above).
        state: the decoder's initial state, a nest of batch-first tensors.
        start_inputs: the first step's input, `(B, V)`.
        max_length: the most steps per output.
        end_fn: `end_fn(labels (B, V)) -> (B,)` booleans: the output ends
            with this step (tfa's `end_fn`). Defaults to `None`: every
            output runs `max_length` steps.
        threshold: a probability in `(0, 1)` for deterministic labels.
            Defaults to `None` (sampled).
        seed: an int or a `keras.random.SeedGenerator`. Defaults to
            `None`.

    Returns:
        A dict: `"labels"` `(B, max_length, V)` float32 0/1 (zeros after
        an output's end), `"lengths"` `(B,)` int32 (the steps each output
        took, its ending step included) and `"alignment"`
        `(B, max_length, S)`, or `None` when `step_fn` returns none.
    """
    if not isinstance(max_length, int) or max_length < 1:
        raise ValueError(
            "Expected max_length to be a positive integer. "
            f"Received: max_length={max_length!r}"
        )
    if threshold is not None and not (
        isinstance(threshold, (int, float)) and 0 < threshold < 1
    ):
        raise ValueError(
            "Expected threshold in (0, 1) or None. "
            f"Received: threshold={threshold!r}"
        )
    inputs = ops.cast(ops.convert_to_tensor(start_inputs), "float32")
    if len(inputs.shape) != 2:
        raise ValueError(
            "Expected start_inputs of shape (batch, labels). Received: "
            f"start_inputs.shape={tuple(inputs.shape)}"
        )
    batch, width = _batch_size(state), inputs.shape[-1]
    if threshold is None:
        uniform = keras.random.uniform((max_length, batch, width), seed=seed)
    zero = ops.convert_to_tensor(0, dtype="int32")
    logits, state, alignment = step_fn(inputs, state, zero)
    labels = ops.zeros((batch, max_length, width), "float32")
    align = _alignment_buffer(batch, max_length, alignment)
    done = ops.zeros((batch,), "bool")
    lengths = ops.zeros((batch,), "int32")

    def advance(index, logits, alignment, carry):
        labels, align, done, lengths = carry
        probs = ops.sigmoid(ops.cast(logits, "float32"))
        if threshold is None:
            on = ops.take(uniform, index, axis=0) < probs
        else:
            on = probs > threshold
        drawn = ops.where(done[:, None], 0.0, ops.cast(on, "float32"))
        labels = _write(labels, index, drawn)
        align = _write(align, index, _as_alignment(batch, alignment))
        lengths = lengths + ops.cast(ops.logical_not(done), "int32")
        if end_fn is not None:
            ended = ops.cast(end_fn(drawn), "bool")
            done = ops.logical_or(done, ended)
        return drawn, (labels, align, done, lengths)

    inputs, carry = advance(
        zero, logits, alignment, (labels, align, done, lengths)
    )

    def cond(index, inputs, state, carry):
        more = ops.logical_not(ops.all(carry[2]))
        return ops.logical_and(index < max_length, more)

    def body(index, inputs, state, carry):
        logits, state, alignment = step_fn(inputs, state, index)
        inputs, carry = advance(index, logits, alignment, carry)
        return index + 1, inputs, state, carry

    one = ops.convert_to_tensor(1, dtype="int32")
    *_, carry = ops.while_loop(cond, body, (one, inputs, state, carry))
    labels, align, _, lengths = carry
    return {
        "labels": labels,
        "lengths": lengths,
        "alignment": None if alignment is None else align,
    }
