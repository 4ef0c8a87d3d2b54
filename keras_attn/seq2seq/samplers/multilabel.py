"""Decoding where each step emits a set of labels: tfa's `InferenceSampler`
with a Bernoulli `sample_fn`."""

import keras
from keras import ops

from keras_attn.seq2seq.samplers.base import (
    Run,
    Sampler,
    batch_size,
    check_max_length,
)


@keras.saving.register_keras_serializable(package="keras_attn")
class MultiLabelSampler(Sampler):
    """Multi-label decoding: at each step every label is on or off.

    The decoder reads a vector of labels instead of a token,

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
        threshold: a probability in `(0, 1)` for deterministic labels.
            Defaults to `None` (sampled).
        seed: an int or a `keras.random.SeedGenerator`. Defaults to
            `None`.

    Call arguments:
        step_fn: the decoder (above).
        state: the decoder's initial state, a nest of batch-first tensors.
        start_inputs: the first step's input, `(B, V)`.
        max_length: the most steps per output.
        end_fn: `end_fn(labels (B, V)) -> (B,)` booleans: the output ends
            with this step (tfa's `end_fn`). Defaults to `None`: every
            output runs `max_length` steps.
        alignment_length: as `Sampler`'s.

    Returns (from a call):
        A dict: `"labels"` `(B, max_length, V)` float32 0/1 (zeros after
        an output's end), `"lengths"` `(B,)` int32 (the steps each output
        took, its ending step included) and `"alignment"`
        `(B, max_length, S)`, or `None` when `step_fn` returns none.
    """

    def __init__(self, threshold=None, seed=None):
        if threshold is not None and not (
            isinstance(threshold, (int, float)) and 0 < threshold < 1
        ):
            raise ValueError(
                "Expected threshold in (0, 1) or None. "
                f"Received: threshold={threshold!r}"
            )
        self.threshold, self.seed = threshold, seed

    def get_config(self):
        return {"threshold": self.threshold, "seed": self.seed}

    def __call__(
        self,
        step_fn,
        state,
        start_inputs,
        max_length,
        end_fn=None,
        alignment_length=None,
    ):
        check_max_length(max_length)
        inputs = ops.cast(ops.convert_to_tensor(start_inputs), "float32")
        if len(inputs.shape) != 2:
            raise ValueError(
                "Expected start_inputs of shape (batch, labels). Received: "
                f"start_inputs.shape={tuple(inputs.shape)}"
            )
        run = Run(step_fn, batch_size(state), max_length, end_fn=end_fn)
        return self.decode(run, state, inputs, alignment_length)

    def start(self, run, inputs, state, logits, width):
        uniform = ()
        if self.threshold is None:
            shape = (run.max_length, run.batch, inputs.shape[-1])
            uniform = keras.random.uniform(shape, seed=self.seed)
        return state, (uniform, ops.zeros((run.batch,), "int32"))

    def next(self, run, index, logits, alignment, done, carry):
        uniform, lengths = carry
        probs = ops.sigmoid(ops.cast(logits, "float32"))
        if self.threshold is None:
            on = ops.take(uniform, index, axis=0) < probs
        else:
            on = probs > self.threshold
        drawn = ops.where(done[:, None], 0.0, ops.cast(on, "float32"))
        lengths = lengths + ops.cast(ops.logical_not(done), "int32")
        end_fn = run.end_fn
        if end_fn is not None:
            done = ops.logical_or(done, ops.cast(end_fn(drawn), "bool"))
        return drawn, done, None, (uniform, lengths)

    def finish(self, run, emitted, alignment, done, carry):
        return {"labels": emitted, "lengths": carry[1], "alignment": alignment}
