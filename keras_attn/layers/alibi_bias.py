"""`AlibiBias`: ALiBi's linear position bias (Press et al. 2022) as a
layer."""

import keras
from keras import layers, ops

from keras_attn.ops import positional
from keras_attn.validation import positive_int


@keras.saving.register_keras_serializable(package="keras_attn")
class AlibiBias(layers.Layer):
    """Attention with linear biases (ALiBi; Press et al. 2022).

    Adds `−m_h · |i − j|` to head `h`'s score of query position `i` for
    key position `j`, with the paper's slopes `m_h = 2^(−8h/H)` (for `H`
    not a power of two, those of the nearest smaller power `n`, then
    every other slope of `2n` heads). In causal attention the keys
    `j > i` are masked, so this is the paper's `−m_h (i − j)`.

    Args:
        **kwargs: base layer arguments.

    Call arguments:
        attention_scores: `(B, H, Tq, Tk)`, before the softmax.
        start_index: position of the first query step (an int or scalar
            tensor): inside a key/value cache, query `t` sits at
            `start_index + t` and the keys at `0..Tk−1`. Defaults to
            `Tk − Tq`, the last `Tq` of the `Tk` positions (`0` in
            self-attention).

    Returns:
        The scores plus the bias, `(B, H, Tq, Tk)`.

    `AlibiBias.bias(num_heads, query_positions, key_positions)` gives the
    bias alone, `(1, H, Tq, Tk)`, for a fused attention op's `bias=`.

    Example:

    >>> import numpy as np
    >>> scores = np.zeros((1, 2, 3, 3), "float32")
    >>> AlibiBias()(scores)[0, 0].tolist()
    [[0.0, -0.0625, -0.125], [-0.0625, 0.0, -0.0625], [-0.125, -0.0625, 0.0]]

    References:
        - [Press et al. 2022](https://arxiv.org/abs/2108.12409)
    """

    # How `MultiHeadPositional(position="alibi")` uses it: `bias` added
    # to the scores.
    attention_role = "scores"

    @classmethod
    def for_attention(cls, attention, name):
        return cls(dtype=attention.dtype_policy, name=name)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.built = True

    @staticmethod
    def slopes(num_heads):
        """The heads' slopes `m_1 … m_H`, a list of floats."""
        positive_int("num_heads", num_heads)
        return positional.alibi_slopes(num_heads)

    @classmethod
    def bias(cls, num_heads, query_positions, key_positions):
        """`−m_h · |i − j|`, `(1, H, Tq, Tk)`, for positions `(Tq,)` and
        `(Tk,)`."""
        return positional.alibi_bias(
            cls.slopes(num_heads), query_positions, key_positions
        )

    def call(self, attention_scores, start_index=None):
        if len(attention_scores.shape) != 4:
            raise ValueError(
                "Expected attention_scores of shape (batch, heads, "
                "query_steps, key_steps). Received: "
                f"attention_scores.shape={tuple(attention_scores.shape)}"
            )
        heads = attention_scores.shape[1]
        shape = ops.shape(attention_scores)
        queries, keys = shape[2], shape[3]
        if start_index is None:
            start_index = keys - queries
        bias = self.bias(
            heads, ops.arange(queries) + start_index, ops.arange(keys)
        )
        return attention_scores + ops.cast(bias, attention_scores.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape
