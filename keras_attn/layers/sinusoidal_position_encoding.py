"""`SinusoidalPositionEncoding`: fixed sin/cos positions, any length."""

import keras
from keras import layers, ops

from keras_attn.layers._added_position import AddedToInputs
from keras_attn.ops import positional


@keras.saving.register_keras_serializable(package="keras_attn")
class SinusoidalPositionEncoding(AddedToInputs, layers.Layer):
    """Sinusoidal position encoding (Vaswani et al. 2017, §3.5).

    Returns the encoding to **add** to the inputs (not the sum), with the
    inputs' shape `(B, T, D)`:
    `PE[t, 2i] = sin(t / w^(2i/D))`, `PE[t, 2i+1] = cos(t / w^(2i/D))` for
    positions `t = start_index, ..., start_index + T - 1` and
    `w = max_wavelength`. It has no weights and works for any `T`,
    including lengths never seen in training.

    Args:
        max_wavelength: the largest wavelength `w`. Defaults to `10000`.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: `(B, T, D)`; only its shape and dtype are used.
        start_index: position of the first step (an int or scalar tensor),
            e.g. for incremental decoding. Defaults to `0`.

    Returns:
        The encoding, `(B, T, D)` in the layer's compute dtype.

    Example:

    >>> import numpy as np
    >>> x = np.zeros((2, 5, 8), "float32")
    >>> y = x + SinusoidalPositionEncoding()(x)
    >>> tuple(y.shape)
    (2, 5, 8)

    References:
        - [Vaswani et al. 2017](https://arxiv.org/abs/1706.03762)
    """

    # How `MultiHeadPositional(position="sinusoidal")` uses it: added to
    # its inputs, one layer for every input width.
    fits_any_width = True

    @classmethod
    def for_attention(cls, attention, name):
        return cls(dtype=attention.dtype_policy, name=name)

    def __init__(self, max_wavelength=10000.0, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(max_wavelength, (int, float)) or max_wavelength <= 0:
            raise ValueError(
                "Expected max_wavelength to be a positive number. "
                f"Received: max_wavelength={max_wavelength!r}"
            )
        self.max_wavelength = float(max_wavelength)
        self.supports_masking = True

    def call(self, inputs, start_index=0):
        shape = ops.shape(inputs)
        length, depth = shape[-2], inputs.shape[-1]
        positions = positional.step_positions(length, start_index)
        encoding = positional.sinusoidal_encoding(
            positions, depth, self.max_wavelength, self.compute_dtype
        )  # (T, D)
        return ops.broadcast_to(encoding, shape)  # (B, T, D)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "max_wavelength": self.max_wavelength,
        }
