"""Scheduled sampling (Bengio et al. 2015) around an `AttentionDecoder`:
tfa's `ScheduledEmbeddingTrainingSampler` and
`ScheduledOutputTrainingSampler` as one Keras layer."""

import keras
from keras import layers, ops

from keras_attn.seq2seq.samplers.base import ban
from keras_attn.seq2seq.samplers.random import inverse_cdf

MODES = ("embedding", "output")


def _probability(value, name="sampling_probability"):
    if not (isinstance(value, (int, float)) and 0 <= value <= 1):
        raise ValueError(
            f"Expected {name} in [0, 1]. Received: {name}={value!r}"
        )
    return float(value)


@keras.saving.register_keras_serializable(package="keras_attn")
class ScheduledSampling(layers.Layer):
    """Teacher forcing that feeds the model's own prediction instead of
    the reference with probability `sampling_probability`.

    While training, at each step `t ≥ 1` a coin with probability `p`
    decides whether the decoder reads the reference input or its own
    previous prediction (Bengio et al. 2015):

    - `mode="embedding"` (tfa's `ScheduledEmbeddingTrainingSampler`):
      `inputs` are token ids `(B, T)` (start token, then the target
      shifted right); the prediction is an id sampled from the previous
      step's `softmax(logits)` (never 0, the padding id), embedded with
      `embedding`.
    - `mode="output"` (tfa's `ScheduledOutputTrainingSampler`): `inputs`
      are vectors `(B, T, E)` (e.g. spectrogram frames); the prediction
      is the previous step's `output_layer` output, which must have width
      `E`. `auxiliary_inputs` `(B, T, A)`, if given, are concatenated to
      the step's input either way (the reference's or the prediction),
      as tfa's `auxiliary_inputs` are: the decoder reads `E + A` features.

    Outside training (`training=False`: evaluation, prediction) the layer
    is plain teacher forcing, whatever `p`. `p` is a non-trainable
    variable: assign it between epochs (e.g. from a callback) to follow a
    schedule, also under `jit_compile`.

    Args:
        decoder: an `AttentionDecoder`.
        output_layer: the layer from decoder outputs to logits
            (`"embedding"`) or to the next input (`"output"`).
        embedding: the layer from ids to decoder inputs (`"embedding"`
            mode only).
        sampling_probability: `p` in `[0, 1]`. Defaults to `0.0`.
        mode: `"embedding"` or `"output"`. Defaults to `"embedding"`.
        seed: seed of the coins and samples. Defaults to `None`.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `(B, T)` ids or `(B, T, E)` vectors, as `mode` says.
        memory: `(B, S, D)` encoder states.
        initial_state: as `AttentionDecoder`'s.
        memory_mask: optional boolean `(B, S)`.
        inputs_mask: optional boolean `(B, T)`: padded steps keep the
            states and give zero outputs. For ids, defaults to
            `inputs != 0`.
        auxiliary_inputs: optional `(B, T, A)`, `mode="output"` only:
            features read at each step beside the input, never predicted.
        training: whether to sample.

    Returns:
        A dict: `"outputs"` `(B, T, ·)` (the output layer's), `"alignments"`
        `(B, T, S)`, and `"sampled"` `(B, T)` boolean, where the
        model's own prediction was read. With `"embedding"`, also
        `"fed_ids"` `(B, T)`, the ids the decoder read.

    Example:

    >>> import numpy as np
    >>> from keras_attn.seq2seq import AttentionDecoder
    >>> layer = ScheduledSampling(
    ...     AttentionDecoder(keras.layers.GRUCell(8)),
    ...     keras.layers.Dense(12),
    ...     keras.layers.Embedding(12, 4),
    ...     sampling_probability=0.25,
    ...     seed=1,
    ... )
    >>> ids = np.array([[1, 5, 7, 3], [1, 4, 0, 0]])
    >>> out = layer(ids, np.ones((2, 6, 8)), training=True)
    >>> tuple(out["outputs"].shape), tuple(out["fed_ids"].shape)
    ((2, 4, 12), (2, 4))

    References:
        - [Bengio et al. 2015](https://arxiv.org/abs/1506.03099)
    """

    def __init__(
        self,
        decoder,
        output_layer,
        embedding=None,
        sampling_probability=0.0,
        mode="embedding",
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if mode not in MODES:
            raise ValueError(
                f"Expected mode to be one of {MODES}. Received: mode={mode!r}"
            )
        decoder, output_layer, embedding = (
            layers.deserialize(x) if isinstance(x, dict) else x
            for x in (decoder, output_layer, embedding)
        )
        if not hasattr(decoder, "step"):
            raise ValueError(
                "Expected decoder to be an AttentionDecoder (with `step`). "
                f"Received: decoder={decoder!r}"
            )
        if (mode == "embedding") != (embedding is not None):
            raise ValueError(
                'mode="embedding" needs an embedding layer and mode="output" '
                f"takes none. Received: mode={mode!r}, embedding={embedding!r}"
            )
        self.decoder, self.output_layer = decoder, output_layer
        self.embedding, self.mode = embedding, mode
        self.initial_probability = _probability(sampling_probability)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self._probability = self.add_weight(
            name="sampling_probability",
            shape=(),
            initializer=keras.initializers.Constant(self.initial_probability),
            trainable=False,
        )

    @property
    def sampling_probability(self):
        """`p`, a non-trainable variable; assign a number in `[0, 1]`."""
        return self._probability

    @sampling_probability.setter
    def sampling_probability(self, value):
        self._probability.assign(_probability(value))

    def build(
        self,
        inputs_shape,
        memory_shape,
        *args,
        auxiliary_inputs_shape=None,
        **kwargs,
    ):
        steps = tuple(inputs_shape[:2])
        if self.mode == "embedding":
            if not self.embedding.built:
                self.embedding.build(steps)
            width = self.embedding.compute_output_shape(steps)[-1]
        else:
            width = inputs_shape[-1]
        extra = (
            0 if auxiliary_inputs_shape is None else auxiliary_inputs_shape[-1]
        )
        # Sublayers of a deserialized model come built.
        if not self.decoder.built:
            self.decoder.build((None, None, width + extra), tuple(memory_shape))
        if not self.output_layer.built:
            self.output_layer.build((None, self.decoder.output_size))
        produced = self.output_layer.compute_output_shape(
            (None, self.decoder.output_size)
        )[-1]
        if self.mode == "output" and produced != width:
            raise ValueError(
                'mode="output" feeds the output layer\'s output back as the '
                f"next input: its width ({produced}) must be the inputs' "
                f"({width}). Received: inputs.shape={tuple(inputs_shape)}"
            )
        self.built = True

    def _sample(self, logits, u):
        """An id from `softmax(logits)` (padding id 0 excluded), by the
        inverse CDF at the uniform numbers `u (B,)`."""
        return inverse_cdf(ban(logits, (0,)), u)

    def call(
        self,
        inputs,
        memory,
        initial_state=None,
        memory_mask=None,
        inputs_mask=None,
        auxiliary_inputs=None,
        training=None,
    ):
        ids = self.mode == "embedding"
        if ids and auxiliary_inputs is not None:
            raise ValueError(
                'auxiliary_inputs go with mode="output" (tfa\'s '
                "ScheduledOutputTrainingSampler). Received: mode='embedding', "
                f"auxiliary_inputs.shape={tuple(auxiliary_inputs.shape)}"
            )
        if ids:
            inputs = ops.cast(inputs, "int32")
            if inputs_mask is None:
                inputs_mask = ops.not_equal(inputs, 0)
        batch, steps = ops.shape(inputs)[0], ops.shape(inputs)[1]
        if inputs_mask is None:
            inputs_mask = ops.ones((batch, steps), "bool")
        memory = ops.cast(memory, self.compute_dtype)
        states = self.decoder.full_states(
            batch, initial_state, ops.shape(memory)[1]
        )
        xs = self._scanned(inputs, inputs_mask, auxiliary_inputs, training)
        extra = 0 if auxiliary_inputs is None else auxiliary_inputs.shape[-1]
        one_step = self._scan_step(memory, memory_mask, extra, training)
        width = self.output_layer.compute_output_shape(
            (None, self.decoder.output_size)
        )[-1]
        init = (
            states,
            ops.zeros((batch, width), self.compute_dtype),
            ops.zeros((batch, ops.shape(memory)[1]), self.compute_dtype),
            ops.zeros((batch,), "int32"),
            ops.zeros((batch,), "bool"),
        )
        _, (_, outputs, alignments, tokens, sampled) = ops.scan(
            one_step, init, xs
        )
        result = {
            "outputs": ops.transpose(outputs, (1, 0, 2)),
            "alignments": ops.transpose(alignments, (1, 0, 2)),
            "sampled": ops.transpose(sampled, (1, 0)),
        }
        if ids:
            result["fed_ids"] = ops.transpose(tokens, (1, 0))
        return result

    def _scanned(self, inputs, inputs_mask, auxiliary_inputs, training):
        """One tensor `(T, B, ·)` that `ops.scan` walks (TensorFlow's
        `scan` cannot check two unknown lengths): each step's reference
        input (then its auxiliary features), whether the prediction is
        read instead (a coin below `p`, never at the first step), the
        uniform number its sample is drawn with, and the step's mask."""
        batch, steps = ops.shape(inputs)[0], ops.shape(inputs)[1]
        p = ops.cast(self._probability, "float32") if training else 0.0
        coins = keras.random.uniform((batch, steps), seed=self.seed_generator)
        draws = keras.random.uniform((batch, steps), seed=self.seed_generator)
        first = ops.arange(steps)[None, :] == 0
        use = ops.logical_and(coins < p, ops.logical_not(first))  # (B, T)
        reference = ops.cast(inputs, "float32")
        if self.mode == "embedding":
            reference = reference[..., None]
        if auxiliary_inputs is not None:
            aux = ops.cast(auxiliary_inputs, "float32")
            reference = ops.concatenate([reference, aux], axis=-1)
        xs = ops.concatenate(
            [
                reference,
                ops.cast(use, "float32")[..., None],
                draws[..., None],
                ops.cast(inputs_mask, "float32")[..., None],
            ],
            axis=-1,
        )
        return ops.transpose(xs, (1, 0, 2))  # (T, B, ·)

    def _scan_step(self, memory, memory_mask, extra, training):
        """The function `ops.scan` runs at each step: the decoder reads the
        reference or its own prediction (then `extra` auxiliary features);
        padded steps keep the states and give zeros."""

        def keep(on, new, old):
            return ops.where(on[:, None], new, old)

        def one_step(carry, x):
            states, previous, _, _, _ = carry
            given, sample = x[:, :-3], x[:, -3] > 0.5
            draw, on = x[:, -2], x[:, -1] > 0.5
            if self.mode == "embedding":
                token = ops.where(
                    sample,
                    self._sample(previous, draw),
                    ops.cast(given[:, 0], "int32"),
                )
                step_in = self.embedding(token)
            else:  # the prediction or the reference, then the auxiliary
                token = ops.zeros_like(ops.cast(on, "int32"))
                own = given[:, : given.shape[-1] - extra]
                step_in = ops.where(sample[:, None], previous, own)
                if extra:
                    step_in = ops.concatenate(
                        [step_in, given[:, given.shape[-1] - extra :]], -1
                    )
            out, new, align = self.decoder.step(
                step_in, states, memory, memory_mask, training
            )
            produced = self.output_layer(out)
            states = [keep(on, n, s) for n, s in zip(new, states, strict=True)]
            produced = keep(on, produced, ops.zeros_like(produced))
            align = keep(on, align, ops.zeros_like(align))
            carry = (states, produced, align, token, sample)
            return carry, carry

        return one_step

    def compute_output_spec(self, inputs, memory, *args, **kwargs):
        batch, steps = inputs.shape[0], inputs.shape[1]
        width = self.output_layer.compute_output_shape(
            (None, self.decoder.output_size)
        )[-1]
        dtype = self.compute_dtype
        spec = {
            "outputs": keras.KerasTensor((batch, steps, width), dtype=dtype),
            "alignments": keras.KerasTensor(
                (batch, steps, memory.shape[1]), dtype=dtype
            ),
            "sampled": keras.KerasTensor((batch, steps), dtype="bool"),
        }
        if self.mode == "embedding":
            spec["fed_ids"] = keras.KerasTensor((batch, steps), dtype="int32")
        return spec

    def get_config(self):
        return {
            **super().get_config(),
            "decoder": layers.serialize(self.decoder),
            "output_layer": layers.serialize(self.output_layer),
            "embedding": None
            if self.embedding is None
            else layers.serialize(self.embedding),
            "sampling_probability": self.initial_probability,
            "mode": self.mode,
            "seed": self.seed,
        }
