"""`MultiHeadPositional`: Keras's `MultiHeadAttention` with positions, g(·)
and a key/value cache."""

import keras
from keras import layers, ops

from keras_attn.layers import _sublayers
from keras_attn.layers._multi_head import arguments
from keras_attn.layers._multi_head.attention import AttentionMixin
from keras_attn.layers._multi_head.cache import KeyValueCacheMixin
from keras_attn.layers._multi_head.masks import MasksMixin
from keras_attn.layers._multi_head.positions import PositionsMixin
from keras_attn.layers._multi_head.shapes import ShapesMixin
from keras_attn.layers._multi_head.sublayers import SublayersMixin
from keras_attn.ops import masking
from keras_attn.validation import (
    check_attention_masks,
    check_key_value,
    set_output_mask,
)

POSITIONS = arguments.POSITIONS
FEED_FORWARDS = arguments.FEED_FORWARDS


@keras.saving.register_keras_serializable(package="keras_attn")
class MultiHeadPositional(
    AttentionMixin,
    PositionsMixin,
    MasksMixin,
    KeyValueCacheMixin,
    SublayersMixin,
    ShapesMixin,
    layers.MultiHeadAttention,
):
    """Multi-head attention with position encodings and a post-attention g.

    A subclass of `keras.layers.MultiHeadAttention`: projections
    (`EinsumDense`, so quantization, LoRA, dtype-policy maps, constraints
    and layouts), `attention_axes`, `use_gate`, `sliding_window`, dropout
    and flash attention (`keras.config.enable_flash_attention()` included)
    are Keras's. What it adds, for query steps `x_t` and keys `x_i`
    (Vaswani et al. 2017):

        h_t^n = Σ_i α_ti^n V^n(x_i + p(i))
        α_ti^n ∝ exp(Q^n(x_t + p(t)) · K^n(x_i + p(i)) / sqrt(key_dim))
        h_t = W_o [h_t^1; ...; h_t^H]             feed_forward=None
        h_t = W_o g([h_t^1; ...; h_t^H])          feed_forward="concat"
        h_t = W_o [g(h_t^1); ...; g(h_t^H)]       feed_forward="per_head"

    `p` is the position encoding (`"sinusoidal"`, `"learned"` or `None`),
    added to the query, key and value inputs, each at its own positions
    along the attention axis. Two positions act on the scores instead:
    `"rotary"` (Su et al. 2021) rotates each head's projected query and key
    by angles of their positions (`positional.rotary`), so scores depend on
    `i − j`; `"alibi"` (Press et al. 2022) adds `−m_h |i − j|` to head
    `h`'s scores (`positional.alibi_bias`). Both need `(B, T, D)` inputs.

    With `num_key_value_heads < num_heads` (grouped-query attention;
    Ainslie et al. 2023; `1` is multi-query) keys and values have fewer
    heads, each shared by `num_heads / num_key_value_heads` query heads:
    the weights of `keras.layers.GroupQueryAttention` and a cache that
    many times smaller.

    Which kernel runs: without a score bias, Keras's `_compute_attention`
    (the backend's fused `dot_product_attention`, flash where Keras allows
    it, unless dropout is active or scores are returned); rotary positions
    and grouped heads keep that path. With a bias (`"alibi"`,
    `attention_bias`, or `score_bias` overridden) the fused
    `dot_product_attention(bias=...)` runs under the same conditions, and
    the explicit einsum path otherwise. `g(z) = W_2 act(W_1 z + b_1) + b_2`;
    `"per_head"` shares one `g` (`value_dim → feed_forward_dim →
    value_dim`) across heads. With `position=None, feed_forward=None` the
    layer computes what `MultiHeadAttention` computes with the same weights,
    except that a query with no key to attend to (a masked query, or every
    key masked) gets zeros instead of an average of the values, and padded
    positions are selected out before the projections, so that NaN or inf
    there never reaches a valid output.

    Args:
        num_heads: number of heads `H`.
        key_dim: size of each query/key head.
        value_dim: size of each value head. Defaults to `key_dim`.
        position: `"sinusoidal"`, `"learned"`, `"rotary"`, `"alibi"` or
            `None`. Defaults to `"sinusoidal"`.
        num_key_value_heads: key/value heads; divides `num_heads`.
            Defaults to `num_heads`.
        max_wavelength: the largest wavelength of rotary angles.
            Defaults to `10000`.
        scaling_factor: rotary positions are divided by it. Defaults
            to `1`.
        max_length: table size for `position="learned"` (required then).
            Defaults to `None`.
        feed_forward: `None`, `"concat"` or `"per_head"`. Defaults to `None`.
        feed_forward_dim: hidden width of `g`. Defaults to twice the input
            width of `g`.
        feed_forward_activation: activation of `g`. Defaults to `"relu"`.
        output_dim: output width; the same as `output_shape=output_dim`.
            Defaults to `None` (the query's width).
        **kwargs: the other arguments of `keras.layers.MultiHeadAttention`
            (`dropout`, `use_bias`, `output_shape`, `attention_axes`,
            `sliding_window`, `flash_attention`, `use_gate`, `seed`, the
            initializers, regularizers and constraints) and of the base
            layer. Positions need a single attention axis.

    Call arguments:
        query: `(B, Tq, Dq)` (or `(B, d_1, ..., d_n, Dq)`).
        value: `(B, Tv, Dv)`; `None` means self-attention on `query`.
        key: `(B, Tv, Dk)`; defaults to `value`.
        query_mask, value_mask, key_mask: boolean `(B, Tq)` / `(B, Tv)`;
            read from the Keras masks when not given. In self-attention
            `value_mask` defaults to `query_mask`.
        attention_mask: boolean, broadcastable to `(B, Tq, Tv)`, or per head
            `(B, H, Tq, Tv)`; `True` = may attend.
        use_causal_mask: query `t` only attends to keys `i <= t`.
        attention_bias: added to the scores, broadcastable to
            `(B, H, Tq, Tv)` (e.g. T5's relative bias); with `score_bias`'s.
        return_attention_scores: also return the weights `(B, H, Tq, Tv)`.
        training: whether dropout is active.
        mask: alias of `query_mask`, filled by Keras for `layer(x)`.
        cache: projected keys and values `(B, 2, T, H_kv, key_dim)`
            (KerasHub's `CachedMultiHeadAttention` layout). With
            `cache_update_index=None` it is a precomputed memory
            (`compute_cache`) for cross-attention. With an index it is a
            self-attention cache (`empty_cache`): the new steps' keys and
            values are written at `cache_update_index`, their positions
            continue from it, and they attend to the positions written so
            far. Masks mean what they mean in the full pass, over the
            cache's `T` keys: `attention_mask` `(B, Tq, T)`, `value_mask`
            `(B, T)`, and `use_causal_mask` for causality within a chunk,
            so a prompt run through the cache equals the full pass.
        cache_update_index: position of `query`'s first step in the cache.
        start_index: position of `query`'s first step for its encoding,
            with a cache. Defaults to `cache_update_index`, else 0.

    Returns:
        `(B, Tq, output_dim)`; rows with no key are zeros, never NaN. With a
        `cache`: `(output, new_cache)`; the scores come last when asked.

    Example:

    >>> import numpy as np
    >>> layer = MultiHeadPositional(num_heads=2, key_dim=4)
    >>> tuple(layer(np.ones((3, 6, 8), "float32")).shape)
    (3, 6, 8)

    References:
        - [Vaswani et al. 2017](https://arxiv.org/abs/1706.03762)
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        position="sinusoidal",
        max_length=None,
        num_key_value_heads=None,
        max_wavelength=10000.0,
        scaling_factor=1.0,
        feed_forward=None,
        feed_forward_dim=None,
        feed_forward_activation="relu",
        dropout=0.0,
        output_dim=None,
        output_shape=None,
        attention_axes=None,
        sliding_window=None,
        **kwargs,
    ):
        kv_heads, output_shape, attention_axes = arguments.check_arguments(
            num_heads,
            key_dim,
            position,
            max_length,
            num_key_value_heads,
            max_wavelength,
            scaling_factor,
            feed_forward,
            dropout,
            output_dim,
            output_shape,
            attention_axes,
            value_dim=value_dim,
            feed_forward_dim=feed_forward_dim,
            sliding_window=sliding_window,
        )
        super().__init__(
            num_heads,
            key_dim,
            value_dim=value_dim,
            dropout=dropout,
            output_shape=output_shape,
            attention_axes=attention_axes,
            sliding_window=sliding_window,
            **kwargs,
        )
        self.position, self.max_length = position, max_length
        self.num_key_value_heads = kv_heads
        self.max_wavelength = float(max_wavelength)
        self.scaling_factor = float(scaling_factor)
        self.feed_forward = feed_forward
        self.feed_forward_dim = feed_forward_dim
        self.feed_forward_activation = keras.activations.get(
            feed_forward_activation
        )
        self.output_dim = output_dim
        self._given_axes = attention_axes
        self._ff_1 = self._ff_2 = None
        self.query_position = self.key_position = None
        self.value_position = None

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        arguments.check_build_shapes(query_shape, value_shape, key_shape)
        self._rank = len(query_shape)
        self._position_axis = arguments.check_axes(
            self._given_axes, self.position, self._rank
        )
        self._build_shapes = {"key": key_shape, "value": value_shape}
        super().build(query_shape, value_shape, key_shape)
        self._widths = {
            "query": query_shape[-1],
            "value": value_shape[-1],
            "key": key_shape[-1],
        }
        self._build_feed_forward()
        self._build_positions(self._widths)

    def call(
        self,
        query,
        value=None,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
        mask=None,
        cache=None,
        cache_update_index=None,
        start_index=None,
        attention_bias=None,
    ):
        if query_mask is None:
            query_mask = mask  # Keras fills `mask` for `layer(x)`
        memory = cache is not None and cache_update_index is None
        self_attention = value is None and not memory
        if value is None:
            value = query
            if value_mask is None and cache is None:
                value_mask = query_mask
        if key is None:
            key = value
            if self_attention:
                key_mask = None
        check_key_value(value.shape, key.shape)
        arguments.check_cache_arguments(
            query, cache, cache_update_index, start_index
        )
        dtype = self.compute_dtype
        query, value, key = (ops.cast(t, dtype) for t in (query, value, key))
        arguments.check_inputs(
            self, query, *((None, None) if memory else (value, key))
        )
        three_d, heads = len(query.shape) == 3, self.num_heads
        if three_d and cache is None:
            check_attention_masks(
                query, key, query_mask, value_mask, attention_mask, heads
            )
        start = start_index
        if start is None:
            start = 0 if cache_update_index is None else cache_update_index
        masked = masking.select(query, query_mask)
        if self_attention:  # keys and values: by the value mask alone
            same = value_mask is None or value_mask is query_mask
            value = key = masked if same else masking.select(query, value_mask)
        query = masked
        query = self._add_positions(query, "query", start)
        if self._use_gate:
            gate = self._gate_dense(query)
        q = self._rotate(self._query_dense(query), start)  # (B, Tq, H, K)
        if cache is not None:
            k, v, cache, length, offset = self._cached_keys(
                cache, value, key, cache_update_index, start
            )
            if self_attention and value_mask is None and query_mask is not None:
                value_mask = masking.written_mask(query_mask, length, offset)
            key_mask = None
        else:
            if not self_attention:
                key = masking.select(
                    key, value_mask if key is value else key_mask
                )
                value = masking.select(value, value_mask)
            k, v = self._project_keys(value, key)
            length, offset = ops.shape(key)[1], None
        if three_d and cache is not None:
            check_attention_masks(
                query, k, query_mask, value_mask, attention_mask, heads
            )
        if three_d and attention_mask is not None:
            if len(attention_mask.shape) == 2:
                attention_mask = attention_mask[None]  # (1, Tq, Tv)
        lean = (
            use_causal_mask
            and offset is None
            and attention_mask is None
            and not self._sliding_window
            and three_d
            and (self_attention or query.shape[1] == key.shape[1] is not None)
            # As Keras's: a subclass that overrides `_compute_attention`
            # gets the causal mask itself, in the five-argument call.
            and type(self)._compute_attention
            is AttentionMixin._compute_attention
        )
        masks = (query_mask, value_mask, key_mask, attention_mask)
        full_mask, rows = self._masks(
            query, value, length, offset, masks, use_causal_mask, lean
        )
        extra = {"use_causal_mask": True} if lean else {}
        bias = self._total_bias(q, start, length, attention_bias)
        if bias is not None:
            extra["attention_bias"] = bias
        context, scores = self._compute_attention(
            q,
            self._repeat_heads(k),  # (B, Tv, H, K), as Keras's GQA
            self._repeat_heads(v),
            full_mask,
            training,
            return_attention_scores,
            **extra,
        )  # (B, Tq, H, Dv), (B, H, Tq, Tv) or None
        if lean and scores is not None and rows is not None:
            scores = masking.zero_rows(scores, rows[:, None])  # (B, H, Tq, Tv)
        if self._use_gate:
            context = ops.multiply(context, gate)
        output = masking.zero_rows(self._output_dense(context), rows)
        set_output_mask(output, query_mask)
        result = (output,) if cache is None else (output, cache)
        if return_attention_scores:
            result += (scores,)
        return result[0] if len(result) == 1 else result

    def get_config(self):
        config = super().get_config()
        config.update(
            dtype=_sublayers.dtype_config(
                self, self._denses() if self.built else []
            ),
            position=self.position,
            max_length=self.max_length,
            num_key_value_heads=self.num_key_value_heads,
            max_wavelength=self.max_wavelength,
            scaling_factor=self.scaling_factor,
            feed_forward=self.feed_forward,
            feed_forward_dim=self.feed_forward_dim,
            feed_forward_activation=keras.activations.serialize(
                self.feed_forward_activation
            ),
            output_dim=self.output_dim,
            output_shape=None if self.output_dim else self._output_shape,
            attention_axes=self._given_axes,
            flash_attention=self._flash_attention,
        )
        return config

    @classmethod
    def from_config(cls, config):
        # keras_attn 0.2 wrote `value_dim=None` and no `activity_regularizer`;
        # both load as they are. Keras's own keys pass through.
        return cls(**config)
