"""`LearnedPositionEmbedding`: a trained table of positions."""

import keras
from keras import layers, ops

from keras_attn.layers._added_position import AddedToInputs
from keras_attn.ops import positional
from keras_attn.validation import (
    clone_initializer,
    positive_int,
)


@keras.saving.register_keras_serializable(package="keras_attn")
class LearnedPositionEmbedding(AddedToInputs, layers.Layer):
    """A learned position table `P` of shape `(max_length, D)`.

    Returns the rows `P[start_index : start_index + T]` broadcast to the
    inputs' shape `(B, T, D)`: the encoding to **add** to the inputs, as
    `SinusoidalPositionEncoding` does.

    Args:
        max_length: the number of positions in the table.
        initializer: initializer of the table. Defaults to `"glorot_uniform"`.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: `(B, T, D)`; only its shape is used.
        start_index: position of the first step. Defaults to `0`.

    Raises:
        ValueError: when the (static) `start_index + T` exceeds `max_length`.

    Example:

    >>> import numpy as np
    >>> layer = LearnedPositionEmbedding(max_length=16)
    >>> tuple(layer(np.zeros((2, 5, 8), "float32")).shape)
    (2, 5, 8)
    """

    # How `MultiHeadPositional(position="learned")` uses it: added to its
    # inputs, one table for each input width.
    fits_any_width = False

    @classmethod
    def for_attention(cls, attention, name):
        return cls(
            attention.max_length, dtype=attention.dtype_policy, name=name
        )

    def __init__(self, max_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        positive_int("max_length", max_length)
        self.max_length = max_length
        self.initializer = keras.initializers.get(initializer)
        self.supports_masking = True

    def build(self, inputs_shape):
        if len(inputs_shape) < 2 or inputs_shape[-1] is None:
            raise ValueError(
                "Expected inputs of shape (batch, time, features) with a "
                f"known feature size. Received: inputs.shape={inputs_shape}"
            )
        length = inputs_shape[-2]
        if length is not None and length > self.max_length:
            raise ValueError(
                f"Inputs have {length} positions but max_length="
                f"{self.max_length}. Received: inputs.shape={inputs_shape}"
            )
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.max_length, inputs_shape[-1]),
            initializer=clone_initializer(self.initializer),
        )
        self.built = True

    def call(self, inputs, start_index=0):
        shape = ops.shape(inputs)
        length = shape[-2]
        if (
            isinstance(length, int)
            and isinstance(start_index, int)
            and start_index + length > self.max_length
        ):
            raise ValueError(
                f"Positions {start_index}..{start_index + length - 1} do not "
                f"fit in max_length={self.max_length}. Received: "
                f"inputs.shape={tuple(inputs.shape)}, start_index={start_index}"
            )
        table = ops.cast(self.embeddings, self.compute_dtype)
        if positional.per_row(start_index):  # a start a row: (B, T, D)
            positions = positional.step_positions(length, start_index)
            return ops.take(table, positions, axis=0)
        rows = ops.slice(
            table, (start_index, 0), (length, table.shape[-1])
        )  # (T, D)
        return ops.broadcast_to(rows, shape)  # (B, T, D)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "max_length": self.max_length,
            "initializer": keras.initializers.serialize(self.initializer),
        }
