"""Monotonic attention (Raffel et al. 2017), `keras.ops`: tfa's
`monotonic_attention`, `BahdanauMonotonicAttention` and
`LuongMonotonicAttention` for Keras 3."""

import keras
from keras import ops

from keras_attn.layers.attention import Attention

MODES = ("parallel", "recursive", "hard")


def _exclusive_cumprod(x):
    """`[1, x_0, x_0 x_1, ...]` along the last axis, through logs (no
    underflow to an exact 0 from a long run of small factors)."""
    tiny = 1e-10
    logs = ops.log(ops.clip(x, tiny, 1.0))
    total = ops.cumsum(logs, axis=-1) - logs  # exclusive
    return ops.exp(total)


def monotonic_attention(p_choose, previous_attention, mode="parallel"):
    """The monotonic attention distribution from choosing probabilities.

    With `p_j` the probability of stopping at memory position `j` and
    `α'` the previous step's attention, `q_j = (1 − p_{j−1}) q_{j−1} +
    α'_j` (`q_0 = α'_0`) and `α_j = p_j q_j` (Raffel et al. 2017, eq. 9):
    attention never moves left, and its mass may sum to less than 1 (the
    rest is "not stopped yet").

    Args:
        p_choose: `(B, S)` probabilities in `[0, 1]`.
        previous_attention: `(B, S)`; at the first step `[1, 0, ..., 0]`
            (`initial_alignment`).
        mode: `"recursive"` (a scan over the memory, exact), `"parallel"`
            (cumulative sums and products, the paper's eq. 14; inexact
            where `p_choose` is within ~1e-10 of 1) or `"hard"` (for
            `p_choose` of 0s and 1s: the first position at or after the
            previous one with `p = 1`). Defaults to `"parallel"`.

    Returns:
        `(B, S)`, the attention.
    """
    if mode not in MODES:
        raise ValueError(
            f"Expected mode to be one of {MODES}. Received: mode={mode!r}"
        )
    p = ops.convert_to_tensor(p_choose)
    previous = ops.cast(previous_attention, p.dtype)
    if mode == "hard":
        # Keep the stops at or after the last position, then the first.
        p = p * ops.cumsum(previous, axis=-1)
        kept = ops.cumprod(1.0 - p, axis=-1)  # exact: factors are 0 or 1
        ones = ops.ones_like(p[:, :1])
        return p * ops.concatenate([ones, kept[:, :-1]], axis=-1)
    if mode == "parallel":
        kept = _exclusive_cumprod(1.0 - p)
        ratio = previous / ops.clip(kept, 1e-10, 1.0)
        return p * kept * ops.cumsum(ratio, axis=-1)
    # recursive: q_j = (1 - p_{j-1}) q_{j-1} + previous_j
    ones = ops.ones_like(p[:, :1])
    carry_on = ops.concatenate([ones, 1.0 - p[:, :-1]], axis=-1)  # (B, S)
    xs = ops.stack([carry_on, previous], axis=-1)  # (B, S, 2)
    xs = ops.transpose(xs, (1, 0, 2))  # (S, B, 2)

    def step(q, x):
        q = x[:, 0] * q + x[:, 1]
        return q, q

    _, q = ops.scan(step, ops.zeros_like(p[:, 0]), xs)
    return p * ops.transpose(q, (1, 0))


def initial_alignment(batch_size, memory_length, dtype="float32"):
    """`[1, 0, ..., 0]` per example: the first step's previous attention."""
    first = ops.arange(memory_length) == 0
    return ops.broadcast_to(
        ops.cast(first, dtype)[None, :], (batch_size, memory_length)
    )


@keras.saving.register_keras_serializable(package="keras_attn")
class MonotonicAttention(Attention):
    """Monotonic attention over a memory, one decoder step at a time.

    The score `e_j` is any of `Attention`'s (`"additive"` is tfa's
    `BahdanauMonotonicAttention`, with `normalize`; `"dot"`/`"general"`
    with `use_scale` its `LuongMonotonicAttention`) plus a learned scalar
    `r` (`score_bias_init`); the probability of stopping at position `j`
    is `p_j = σ(e_j + r + n·ε)`, `ε ~ N(0, 1)` (`sigmoid_noise = n`,
    during training only), or `[e_j + r + n·ε > 0]` in `"hard"` mode;
    the attention follows from `p` and the previous step's attention
    (`monotonic_attention`). Padded memory positions are never stopped
    at (`p = 0`). The context is `Σ_j α_j h_j`.

    Args:
        mode: `"parallel"`, `"recursive"` or `"hard"` (see
            `monotonic_attention`). Defaults to `"parallel"`.
        sigmoid_noise: standard deviation of the noise added to the
            scores before the sigmoid while training (Raffel et al.
            2017 use it to push `p` towards 0 or 1). tfa adds it at
            inference too. Defaults to `0.0`.
        score_bias_init: initial value of `r`. Defaults to `0.0`.
        **kwargs: `Attention`'s arguments (`score`, `units`, `use_scale`,
            `normalize`, ...).

    Call arguments:
        query: `(B, Dq)`, the decoder state.
        memory: `(B, S, Dk)`, the encoder states (keys and values).
        previous_alignment: `(B, S)`, the previous step's attention
            (`initial_alignment` at the first step).
        memory_mask: optional boolean `(B, S)`.
        training: whether the noise is added.

    Returns:
        `(context (B, Dk), alignment (B, S))`.

    Example:

    >>> import numpy as np
    >>> layer = MonotonicAttention(score="additive", units=8)
    >>> memory = np.ones((2, 5, 6), "float32")
    >>> context, a = layer(np.ones((2, 4)), memory, initial_alignment(2, 5))
    >>> tuple(context.shape), tuple(a.shape)
    ((2, 6), (2, 5))

    References:
        - [Raffel et al. 2017](https://arxiv.org/abs/1704.00784)
    """

    def __init__(
        self,
        mode="parallel",
        sigmoid_noise=0.0,
        score_bias_init=0.0,
        score="additive",
        **kwargs,
    ):
        if mode not in MODES:
            raise ValueError(
                f"Expected mode to be one of {MODES}. Received: mode={mode!r}"
            )
        if not (isinstance(sigmoid_noise, (int, float)) and sigmoid_noise >= 0):
            raise ValueError(
                "Expected sigmoid_noise to be a number >= 0. Received: "
                f"sigmoid_noise={sigmoid_noise!r}"
            )
        if kwargs.get("dropout"):
            raise ValueError(
                "MonotonicAttention has no dropout on its weights. Received: "
                f"dropout={kwargs['dropout']!r}"
            )
        super().__init__(score=score, **kwargs)
        self.mode = mode
        self.sigmoid_noise = float(sigmoid_noise)
        self.score_bias_init = float(score_bias_init)
        self.noise_seed = keras.random.SeedGenerator(self.seed)

    def build(
        self,
        query_shape,
        memory_shape,
        previous_alignment_shape=None,
        memory_mask_shape=None,
    ):
        super().build((query_shape[0], 1, query_shape[-1]), memory_shape)
        self.score_bias = self.add_weight(
            name="score_bias",
            shape=(),
            initializer=keras.initializers.Constant(self.score_bias_init),
        )

    def load_own_variables(self, store):
        # Keras's own loading: no file of keras_attn 0.1 holds this layer.
        keras.layers.Layer.load_own_variables(self, store)

    def call(
        self,
        query,
        memory,
        previous_alignment,
        memory_mask=None,
        training=None,
    ):
        query = ops.cast(query, self.compute_dtype)
        memory = ops.cast(memory, self.compute_dtype)
        scores = self._calculate_scores(query[:, None, :], memory)[:, 0]
        scores = scores + ops.cast(self.score_bias, scores.dtype)
        if training and self.sigmoid_noise > 0:
            scores = scores + self.sigmoid_noise * keras.random.normal(
                ops.shape(scores), dtype=scores.dtype, seed=self.noise_seed
            )
        if self.mode == "hard":
            p = ops.cast(scores > 0, scores.dtype)
        else:
            p = ops.sigmoid(scores)
        if memory_mask is not None:
            p = ops.where(ops.cast(memory_mask, "bool"), p, 0.0)
        alignment = monotonic_attention(p, previous_alignment, self.mode)
        context = ops.einsum("bs,bsd->bd", alignment, memory)
        return context, alignment

    def compute_output_spec(
        self, query, memory, previous_alignment, memory_mask=None, **kw
    ):
        dtype = self.compute_dtype
        batch = query.shape[0]
        return (
            keras.KerasTensor((batch, memory.shape[-1]), dtype=dtype),
            keras.KerasTensor((batch, memory.shape[1]), dtype=dtype),
        )

    def compute_mask(self, *args, **kwargs):
        return None

    def get_config(self):
        config = super().get_config()
        config.update(
            mode=self.mode,
            sigmoid_noise=self.sigmoid_noise,
            score_bias_init=self.score_bias_init,
        )
        return config
