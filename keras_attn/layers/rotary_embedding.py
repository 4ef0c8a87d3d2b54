"""`RotaryEmbedding`: rotary positions (Su et al. 2021) as a layer."""

import keras
from keras import layers, ops

from keras_attn.ops import positional
from keras_attn.validation import positive_number


@keras.saving.register_keras_serializable(package="keras_attn")
class RotaryEmbedding(layers.Layer):
    """Rotary position embedding (RoPE; Su et al. 2021).

    Rotates pairs of features of queries or keys by angles of their
    positions, so that the dot product of a query at position `p` and a
    key at `p'` depends on `p − p'` only. KerasHub's half-split layout:
    with `x = [x₁; x₂]` (the halves of the feature axis) and
    `θ_j = (p / s) · w^(−2j/K)`, `j < K/2`,
    `RoPE(x) = x · cos Θ + [−x₂; x₁] · sin Θ`, `Θ = [θ; θ]`.

    Args:
        max_wavelength: `w`. Defaults to `10000`.
        scaling_factor: `s`; positions are divided by it (position
            interpolation for longer contexts). Defaults to `1`.
        sequence_axis: the axis of positions. Defaults to `1`.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: `(B, T, ..., K)` with `K` even, e.g. projected heads
            `(B, T, H, K)` or `(B, T, K)`.
        start_index: position of the first step (an int or scalar
            tensor), e.g. inside a key/value cache. Defaults to `0`.

    Returns:
        `inputs` rotated, same shape and dtype.

    Example:

    >>> import numpy as np
    >>> q = np.ones((2, 5, 4, 8), "float32")  # (B, T, heads, head_dim)
    >>> tuple(RotaryEmbedding()(q).shape)
    (2, 5, 4, 8)

    References:
        - [Su et al. 2021](https://arxiv.org/abs/2104.09864)
    """

    # How `MultiHeadPositional(position="rotary")` uses it: on the
    # projected queries and keys, `(B, T, H, K)`.
    attention_role = "heads"

    @classmethod
    def for_attention(cls, attention, name):
        return cls(
            attention.max_wavelength,
            attention.scaling_factor,
            dtype=attention.dtype_policy,
            name=name,
        )

    def __init__(
        self,
        max_wavelength=10000.0,
        scaling_factor=1.0,
        sequence_axis=1,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.max_wavelength = positive_number("max_wavelength", max_wavelength)
        self.scaling_factor = positive_number("scaling_factor", scaling_factor)
        if isinstance(sequence_axis, bool) or not isinstance(
            sequence_axis, int
        ):
            raise ValueError(
                "Expected sequence_axis to be an int. "
                f"Received: sequence_axis={sequence_axis!r}"
            )
        self.sequence_axis = sequence_axis
        self.supports_masking = True
        self.built = True

    def call(self, inputs, start_index=0):
        rank = len(inputs.shape)
        axis = self.sequence_axis % rank
        depth = inputs.shape[-1]
        if depth is None or depth % 2 or axis in (0, rank - 1):
            raise ValueError(
                "Expected inputs with an even, known feature axis (last) "
                f"and positions along axis {self.sequence_axis}. Received: "
                f"inputs.shape={tuple(inputs.shape)}"
            )
        # `positional.rotary` wants (..., T, H, K): a head axis is added to
        # (B, T, K), the positions are moved before the heads otherwise
        # (4-D at most in the graph: microcontrollers slice no more).
        if rank == 3:
            x = inputs[..., None, :]  # (B, T, 1, K)
        else:
            x = ops.moveaxis(inputs, axis, -3)
        positions = positional.step_positions(ops.shape(x)[-3], start_index)
        turned = positional.rotary(
            x, positions, self.max_wavelength, self.scaling_factor
        )
        if rank == 3:
            return turned[..., 0, :]
        return ops.moveaxis(turned, -3, axis)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "max_wavelength": self.max_wavelength,
            "scaling_factor": self.scaling_factor,
            "sequence_axis": self.sequence_axis,
        }
