"""`AdditiveAttention`: true Bahdanau attention with learned W₁, W₂, v."""

import keras

from keras_attn.layers.attention import Attention


@keras.saving.register_keras_serializable(package="keras_attn")
class AdditiveAttention(Attention):
    """Bahdanau (additive) attention: `e_ij = vᵀ tanh(W₁ h_j + W₂ s_i + b)`.

    Unlike `keras.layers.AdditiveAttention`, which scores
    `vᵀ tanh(s_i + h_j)` with no projections, this layer learns `W₁`
    `(Dk → units)`, `W₂` `(Dq → units)`, `v` `(units,)` and an optional bias
    `b`, as in Bahdanau et al. (2015). It is exactly
    `Attention(score="additive", units=units)`; see `Attention` for call
    arguments, masks and outputs.

    Args:
        units: hidden width of the score network (positive integer).
        use_bias: whether the score has the bias `b`. Defaults to `True`.
        dropout: dropout rate on the attention weights. Defaults to `0.0`.
        **kwargs: the other `Attention` arguments (initializers,
            regularizers) and base layer arguments.

    Example:

    >>> import numpy as np
    >>> layer = AdditiveAttention(units=8)
    >>> context, weights = layer(
    ...     np.ones((2, 3, 4)), np.ones((2, 5, 6)),
    ...     return_attention_scores=True)
    >>> tuple(context.shape), tuple(weights.shape)
    ((2, 3, 6), (2, 3, 5))

    References:
        - [Bahdanau et al. 2015](https://arxiv.org/abs/1409.0473)
    """

    def __init__(self, units, use_bias=True, dropout=0.0, **kwargs):
        kwargs.pop("score", None)
        kwargs.pop("rank", None)
        super().__init__(
            score="additive",
            units=units,
            use_bias=use_bias,
            dropout=dropout,
            **kwargs,
        )

    def get_config(self):
        config = super().get_config()
        config.pop("score")
        config.pop("rank")
        return config
