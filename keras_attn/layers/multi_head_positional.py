"""`MultiHeadPositional`: Keras's `MultiHeadAttention` with positions, g(·)
and a key/value cache."""

import keras
from keras import layers, ops

from keras_attn.layers import _sublayers
from keras_attn.layers.learned_position_embedding import (
    LearnedPositionEmbedding,
)
from keras_attn.layers.sinusoidal_position_encoding import (
    SinusoidalPositionEncoding,
)
from keras_attn.ops import masking, positional
from keras_attn.validation import (
    axes_argument,
    check_attention_masks,
    check_batch,
    check_key_value,
    check_rate,
    output_shape_argument,
    positive_int,
    set_output_mask,
)

POSITIONS = ("sinusoidal", "learned", "rotary", "alibi", None)
ADDED = ("sinusoidal", "learned")  # added to the inputs
FEED_FORWARDS = (None, "concat", "per_head")


@keras.saving.register_keras_serializable(package="keras_attn")
class MultiHeadPositional(layers.MultiHeadAttention):
    """Multi-head attention with position encodings and a post-attention g.

    A subclass of `keras.layers.MultiHeadAttention`: projections
    (`EinsumDense`, so quantization, LoRA, dtype-policy maps, constraints
    and layouts), `attention_axes`, `use_gate`, `sliding_window`, dropout
    and flash attention (`keras.config.enable_flash_attention()` included)
    are Keras's. What it adds, for query steps `x_t` and keys `x_i`
    (seed 002; Vaswani et al. 2017):

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
        for name, value in (
            ("num_heads", num_heads),
            ("key_dim", key_dim),
        ):
            positive_int(name, value)
        for name, value in (
            ("value_dim", value_dim),
            ("feed_forward_dim", feed_forward_dim),
            ("output_dim", output_dim),
            ("sliding_window", sliding_window),
            ("num_key_value_heads", num_key_value_heads),
        ):
            positive_int(name, value, allow_none=True)
        kv_heads = num_key_value_heads or num_heads
        if num_heads % kv_heads:
            raise ValueError(
                "Expected num_key_value_heads to divide num_heads. Received: "
                f"num_heads={num_heads}, num_key_value_heads={kv_heads}"
            )
        if position == "rotary" and key_dim % 2:
            raise ValueError(
                "Rotary positions turn pairs of features: key_dim must be "
                f"even. Received: key_dim={key_dim}"
            )
        for name, value in (
            ("max_wavelength", max_wavelength),
            ("scaling_factor", scaling_factor),
        ):
            if isinstance(value, bool) or not (
                isinstance(value, (int, float)) and value > 0
            ):
                raise ValueError(
                    f"Expected {name} to be a positive number. "
                    f"Received: {name}={value!r}"
                )
        if position not in POSITIONS:
            raise ValueError(
                f"Expected position to be one of {POSITIONS}. "
                f"Received: position={position!r}"
            )
        positive_int("max_length", max_length, position != "learned")
        if feed_forward not in FEED_FORWARDS:
            raise ValueError(
                f"Expected feed_forward to be one of {FEED_FORWARDS}. "
                f"Received: feed_forward={feed_forward!r}"
            )
        check_rate("dropout", dropout)
        output_shape = output_shape_argument(output_shape, output_dim)
        attention_axes = axes_argument(attention_axes)
        if position is not None and attention_axes and len(attention_axes) > 1:
            raise ValueError(
                "Positions run along one axis: give a single attention axis "
                f"or position=None. Received: attention_axes={attention_axes}"
                f", position={position!r}"
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
        self.position = position
        self.max_length = max_length
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

    # Keras's private settings under the public names our 0.2 layer had.
    flash_attention = property(lambda self: self._flash_attention)
    sliding_window = property(lambda self: self._sliding_window)
    use_gate = property(lambda self: self._use_gate)

    # The weights under the names of keras_attn 0.1 (read-only views).
    query_kernel = property(lambda self: self._query_dense.kernel)
    query_bias = property(lambda self: self._query_dense.bias)
    key_kernel = property(lambda self: self._key_dense.kernel)
    key_bias = property(lambda self: self._key_dense.bias)
    value_kernel = property(lambda self: self._value_dense.kernel)
    value_bias = property(lambda self: self._value_dense.bias)
    output_kernel = property(lambda self: self._output_dense.kernel)
    output_bias = property(lambda self: self._output_dense.bias)
    ff_kernel_1 = property(lambda self: self._ff_1.kernel)
    ff_bias_1 = property(lambda self: self._ff_1.bias)
    ff_kernel_2 = property(lambda self: self._ff_2.kernel)
    ff_bias_2 = property(lambda self: self._ff_2.bias)

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        check_key_value(value_shape, key_shape)
        for name, shape in (
            ("query", query_shape),
            ("value", value_shape),
            ("key", key_shape),
        ):
            if len(shape) < 3 or shape[-1] is None:
                raise ValueError(
                    f"Expected {name} of shape (batch, time, features) (or "
                    "(batch, d_1, ..., d_n, features)) with known features. "
                    f"Received: {name}.shape={tuple(shape)}"
                )
        rank = len(query_shape)
        self._position_axis = self._check_axes(rank)
        self._build_shapes = {"key": key_shape, "value": value_shape}
        super().build(query_shape, value_shape, key_shape)
        self._rank = rank
        self._widths = {
            "query": query_shape[-1],
            "value": value_shape[-1],
            "key": key_shape[-1],
        }
        if self.feed_forward is not None:
            width = self.num_heads * self.value_dim
            if self.feed_forward == "per_head":
                width = self.value_dim
            hidden = self.feed_forward_dim or 2 * width
            common = self._get_common_kwargs_for_sublayer()
            del common["activity_regularizer"]
            self._ff_1 = layers.Dense(
                hidden,
                activation=self.feed_forward_activation,
                name="feed_forward_1",
                **common,
            )
            self._ff_1.build((None, width))
            common = self._get_common_kwargs_for_sublayer()
            del common["activity_regularizer"]
            self._ff_2 = layers.Dense(width, name="feed_forward_2", **common)
            self._ff_2.build((None, hidden))
        # A sinusoidal encoding fits any width: one layer. A learned table
        # is created per distinct input width (one for self-attention).
        self._stream_positions = {}
        if self.position in ADDED:
            tables = {}
            for stream in ("query", "value", "key"):
                width = self._widths[stream]
                if not tables or (
                    self.position == "learned" and width not in tables
                ):
                    table = self._position_layer(f"{stream}_position")
                    table.build((None, None, width))
                    setattr(self, f"{stream}_position", table)
                    tables[width] = table
                self._stream_positions[stream] = tables.get(
                    width, self.query_position
                )

    def _check_axes(self, rank):
        """The one attention axis positions run along (checked)."""
        inner = tuple(range(1, rank - 1))
        axes = self._given_axes or inner
        resolved = [a + rank if a < 0 else a for a in axes]
        if any(a not in inner for a in resolved) or len(set(resolved)) < len(
            resolved
        ):
            raise ValueError(
                f"Expected attention_axes among {inner} (or "
                f"{tuple(a - rank for a in inner)}) for inputs of rank "
                f"{rank}. Received: attention_axes={self._given_axes!r}"
            )
        if self.position not in ADDED + (None,) and rank != 3:
            raise ValueError(
                f"position={self.position!r} needs inputs of shape (batch, "
                "time, features). Received: inputs of rank "
                f"{rank}"
            )
        if self.position is not None and len(resolved) > 1:
            raise ValueError(
                "Positions run along one axis: give a single attention axis "
                "or position=None. Received: "
                f"attention_axes={self._given_axes!r}, "
                f"position={self.position!r}"
            )
        return resolved[0]

    def _position_layer(self, name):
        if self.position == "sinusoidal":
            return SinusoidalPositionEncoding(
                dtype=self.dtype_policy, name=name
            )
        return LearnedPositionEmbedding(
            self.max_length, dtype=self.dtype_policy, name=name
        )

    def _build_attention(self, rank):
        # Called by `MultiHeadAttention.build` between the value and output
        # projections: with grouped heads, the key and value projections
        # it made are replaced by ones with `num_key_value_heads` heads
        # (the weight order stays query, key, value, output).
        if self.num_key_value_heads != self.num_heads:
            for name, width in (("key", self._key_dim), ("value", None)):
                old = getattr(self, f"_{name}_dense")
                self._tracker.untrack(old)
                heads = (self.num_key_value_heads, width or self._value_dim)
                new = layers.EinsumDense(
                    old.equation,
                    output_shape=(*old.partial_output_shape[:-2], *heads),
                    bias_axes=old.bias_axes,
                    name=name,
                    **self._get_common_kwargs_for_sublayer(),
                )
                new.build(self._build_shapes[name])
                setattr(self, f"_{name}_dense", new)
        super()._build_attention(rank)

    def _add_positions(self, x, stream, start_index=0):
        """`x + p(start_index + i)` along the attention axis."""
        if self.position not in ADDED:
            return x
        axis, table = self._position_axis, self._stream_positions[stream]
        if axis == len(x.shape) - 2:
            return x + table(x, start_index=start_index)
        moved = ops.moveaxis(x, axis, -2)  # (B, ..., T, D)
        moved = moved + table(moved, start_index=start_index)
        return ops.moveaxis(moved, -2, axis)

    def _denses(self):
        names = ("_query_dense", "_key_dense", "_gate_dense", "_value_dense")
        names += ("_output_dense", "_ff_1", "_ff_2")
        return [d for d in (getattr(self, n, None) for n in names) if d]

    def load_own_variables(self, store):
        """Also load `.keras` files written by keras_attn 0.1, whose layer
        held the projection weights itself (same order as `get_weights()`)."""
        denses = self._denses()
        legacy = [v for dense in denses for v in dense.variables]
        _sublayers.load_own_variables(
            self, store, legacy, denses, super().load_own_variables
        )

    def enable_lora(self, rank, targets=("query", "value")):
        """LoRA (Hu et al. 2021) on the projections named in `targets`
        (`"query"`, `"key"`, `"value"`, `"attention_output"`, `"gate"`,
        `"feed_forward_1"`, `"feed_forward_2"`); the other weights freeze.
        KerasHub's default targets are query and value."""
        _sublayers.enable_lora(self.name, self._denses(), rank, targets)

    # -- attention -------------------------------------------------------
    def _masked_softmax(self, attention_scores, attention_mask=None):
        """Keras's masked softmax, except that masked keys get exactly zero
        weight and a query with no key gets zeros (not uniform weights)."""
        if attention_mask is None:
            return super()._masked_softmax(attention_scores)
        axis = -len(self._attention_axes) * 2 - 1
        for _ in range(len(attention_scores.shape) - len(attention_mask.shape)):
            attention_mask = ops.expand_dims(attention_mask, axis=axis)
        keys = tuple(range(-len(self._attention_axes), 0))
        if len(keys) == 1:
            return masking.masked_softmax(attention_scores, attention_mask)
        shape = ops.shape(attention_scores)  # several key axes: one softmax
        flat = (*shape[: -len(keys)], -1)
        mask = ops.broadcast_to(attention_mask, shape)
        weights = masking.masked_softmax(
            ops.reshape(attention_scores, flat), ops.reshape(mask, flat)
        )
        return ops.reshape(weights, shape)

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
        attention_bias=None,
    ):
        """Keras's attention (grouped heads repeated; a score bias through
        `_biased_attention`), then `g` on the heads' outputs."""
        groups = self.num_heads // self.num_key_value_heads
        if groups > 1:  # (B, T, H_kv, K) → (B, T, H, K), as Keras's GQA
            key = ops.repeat(key, groups, axis=-2)
            value = ops.repeat(value, groups, axis=-2)
        if attention_bias is not None:
            context, scores = self._biased_attention(
                query,
                key,
                value,
                attention_mask,
                attention_bias,
                training,
                return_attention_scores,
                use_causal_mask,
            )
            return self._g(context), scores
        # JAX's fused op needs value heads as wide as key heads (Keras 3.15
        # MultiHeadAttention fails there): take the explicit path.
        explicit = return_attention_scores or (
            self.value_dim != self.key_dim
            and keras.backend.backend() == "jax"
            and not self._flash_attention
        )
        context, scores = super()._compute_attention(
            query,
            key,
            value,
            attention_mask,
            training,
            explicit,
            use_causal_mask=use_causal_mask,
        )
        return self._g(context), scores if return_attention_scores else None

    def _biased_attention(
        self, query, key, value, mask, bias, training, explicit, causal
    ):
        """Attention with `bias` added to the scores, on Keras's fused op
        where `MultiHeadAttention` would use it, else on its einsums."""
        if mask is not None:
            while len(mask.shape) < 4:  # (B, Tq, Tk) → (B, 1, Tq, Tk)
                mask = ops.expand_dims(mask, -3)
            mask = ops.cast(mask, "bool")
        if causal:
            causal = self._compute_causal_mask(query, value)[:, None]
            mask = causal if mask is None else ops.logical_and(mask, causal)
        if not (explicit or self._dropout > 0.0 or len(query.shape) != 4):
            bias = ops.cast(bias, query.dtype)
            if mask is not None:  # one of them only (PyTorch's rule)
                low = masking.large_negative_number(query.dtype)
                bias = ops.where(mask, bias, ops.cast(low, query.dtype))
            context = ops.dot_product_attention(
                query,
                key,
                value,
                bias=bias,
                scale=self._inverse_sqrt_key_dim,
                flash_attention=self._flash_attention,
            )
            return context, None
        query = ops.multiply(
            query, ops.cast(self._inverse_sqrt_key_dim, query.dtype)
        )
        scores = ops.einsum(self._dot_product_equation, key, query)
        scores = self._masked_softmax(
            scores + ops.cast(bias, scores.dtype), mask
        )
        dropped = self._dropout_layer(scores, training=training)
        context = ops.einsum(self._combine_equation, dropped, value)
        return context, scores

    def score_bias(self, query_positions, key_positions):
        """A bias for the scores, broadcastable to `(B, H, Tq, Tk)`, or
        `None`: ALiBi's for `position="alibi"`. Override it for other
        relative positions (e.g. a learned T5 bucket table built in
        `build`); `query_positions` `(Tq,)` and `key_positions` `(Tk,)`
        are the steps' absolute positions (they continue in a cache)."""
        if self.position != "alibi":
            return None
        slopes = positional.alibi_slopes(self.num_heads)
        return positional.alibi_bias(slopes, query_positions, key_positions)

    def _rotate(self, x, start):
        """`x` `(B, T, H, K)` rotated at positions `start..start+T-1`."""
        if self.position != "rotary":
            return x
        positions = ops.arange(ops.shape(x)[1]) + start
        return positional.rotary(
            x, positions, self.max_wavelength, self.scaling_factor
        )

    def _g(self, context):
        if self.feed_forward is None:
            return context
        if self.feed_forward == "per_head":
            return self._ff_2(self._ff_1(context))  # (..., H, Dv)
        heads = ops.shape(context)
        flat = ops.reshape(context, (*heads[:-2], -1))  # (..., H*Dv)
        return ops.reshape(self._ff_2(self._ff_1(flat)), heads)

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
        self._check_cache_arguments(
            query, cache, cache_update_index, start_index
        )
        dtype = self.compute_dtype
        query, value, key = (ops.cast(t, dtype) for t in (query, value, key))
        self._check_inputs(query, *((None, None) if memory else (value, key)))
        heads = self.num_heads
        if len(query.shape) == 3 and cache is None:
            check_attention_masks(
                query, key, query_mask, value_mask, attention_mask, heads
            )
        start = start_index
        if start is None:
            start = 0 if cache_update_index is None else cache_update_index
        query = masking.select(query, query_mask)
        if self_attention:
            value = key = query
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
            k = self._rotate(
                self._key_dense(self._add_positions(key, "key")), 0
            )
            v = self._value_dense(self._add_positions(value, "value"))
            length, offset = ops.shape(key)[1], None
        if len(query.shape) == 3:
            if cache is not None:
                check_attention_masks(
                    query, k, query_mask, value_mask, attention_mask, heads
                )
            if attention_mask is not None and len(attention_mask.shape) == 2:
                attention_mask = attention_mask[None]  # (1, Tq, Tv)
        lean = (
            use_causal_mask
            and offset is None
            and attention_mask is None
            and not self._sliding_window
            and len(query.shape) == 3
            and (self_attention or query.shape[1] == key.shape[1] is not None)
        )
        if lean:
            # Causality and padding only: the fused op gets `is_causal` and
            # the keys' padding as `(B, 1, 1, Tv)`; no `(Tq, Tv)` mask is
            # built (the memory of long sequences on GPUs).
            full_mask, rows = masking.lean_masks(query_mask, value_mask)
        else:
            full_mask = self._full_mask(
                query,
                value,
                length,
                offset,
                query_mask,
                value_mask,
                key_mask,
                attention_mask,
                use_causal_mask,
            )
            rows = self._rows_with_a_key(full_mask, len(query.shape) - 1)
        bias = attention_bias
        if len(query.shape) == 3:
            own = self.score_bias(
                ops.arange(ops.shape(q)[1]) + start, ops.arange(length)
            )
            if own is not None:
                bias = own if bias is None else ops.add(bias, own)
        context, scores = self._compute_attention(
            q,
            k,
            v,
            full_mask,
            training,
            return_attention_scores,
            use_causal_mask=bool(lean or full_mask is None and use_causal_mask),
            attention_bias=bias,
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

    def _check_cache_arguments(self, query, cache, index, start_index):
        if cache is not None and len(query.shape) != 3:
            raise ValueError(
                "A cache needs query of shape (batch, time, features). "
                f"Received: query.shape={tuple(query.shape)}"
            )
        if cache is not None:
            return
        for name, given in (
            ("cache_update_index", index),
            ("start_index", start_index),
        ):
            if given is not None:
                raise ValueError(
                    f"{name} needs a cache. Received: cache=None, "
                    f"{name}={given!r}"
                )

    def _check_inputs(self, query, value, key):
        """Batch sizes (`check_batch`) and the rank and width built for;
        `value`/`key` are `None` for a cross-attention memory."""
        check_batch(
            query,
            query if value is None else value,
            query if key is None else key,
        )
        for name, tensor in (("query", query), ("value", value), ("key", key)):
            if tensor is None:
                continue
            want = getattr(self, "_widths", {}).get(name)
            rank = getattr(self, "_rank", len(tensor.shape))
            if len(tensor.shape) != rank or tensor.shape[-1] not in (
                None,
                want,
            ):
                raise ValueError(
                    f"Expected {name} of rank {rank} with {want} features: "
                    "the layer was built for that shape. Received: "
                    f"{name}.shape={tuple(tensor.shape)}"
                )

    def _full_mask(
        self,
        query,
        value,
        length,
        offset,
        query_mask,
        value_mask,
        key_mask,
        attention_mask,
        use_causal_mask,
    ):
        """Every mask merged, as Keras merges them, `(B|1, Tq, Tv)` (or per
        head); with a self-attention cache (`offset`, the index of the
        first query step), keys after the written ones are masked and the
        causal and sliding-window masks are shifted by `offset`."""
        if offset is None and len(query.shape) > 3:
            return self._compute_attention_mask(
                query,
                value,
                query_mask=query_mask,
                value_mask=value_mask,
                key_mask=key_mask,
                attention_mask=attention_mask,
                use_causal_mask=use_causal_mask,
            )
        steps, start = ops.shape(query)[1], 0 if offset is None else offset
        merged = None
        if use_causal_mask:
            merged = masking.causal_mask(steps, length, start)[None]
        if offset is not None:  # the written keys only
            written = masking.causal_mask(1, length, offset + steps - 1)[None]
            merged = written if merged is None else merged & written
        if self._sliding_window:
            band = masking.band_mask(steps, length, self._sliding_window, start)
            merged = band[None] if merged is None else merged & band
        for extra in (
            masking.merge_masks(
                ops.shape(query)[1],
                length,
                query_mask=query_mask,
                value_mask=value_mask,
                attention_mask=None,
            ),
            None if key_mask is None else ops.cast(key_mask, "bool")[:, None],
            attention_mask,
        ):
            if extra is None:
                continue
            extra = ops.cast(extra, "bool")
            if merged is not None and len(extra.shape) == 4:
                merged = merged[:, None]
            elif merged is not None and len(merged.shape) == 4:
                extra = extra[:, None]
            merged = extra if merged is None else ops.logical_and(merged, extra)
        return merged

    def _rows_with_a_key(self, full_mask, rank):
        """`(B|1, d_1, ..., d_n)` (`rank` axes): queries with a key in
        some head, from a merged mask; `None` where it cannot tell."""
        if full_mask is None:
            return None
        n = len(self._attention_axes)
        rows = ops.any(full_mask, axis=tuple(range(-n, 0)))
        if len(rows.shape) > rank and len(full_mask.shape) == 4:
            rows = ops.any(rows, axis=1)  # per-head masks (3-D inputs)
        if len(rows.shape) != rank:
            return None
        axes = self._attention_axes
        free = [a for a in range(1, rank) if a not in axes]
        back = [[0, *free, *axes].index(i) for i in range(rank)]
        if back != list(range(rank)):
            rows = ops.transpose(rows, back)
        return rows

    # -- incremental decoding --------------------------------------------
    def _check_cacheable(self):
        if self.value_dim != self.key_dim:
            raise ValueError(
                "A key/value cache needs value heads as wide as key heads. "
                f"Received: key_dim={self.key_dim}, value_dim={self.value_dim}"
            )

    def compute_cache(self, value, key=None):
        """Projected keys and values of `value` `(B, Tv, D)` (positions
        `0..Tv-1`), `(B, 2, Tv, H, key_dim)`: a cross-attention memory,
        computed once and passed as `cache` (no index) at each step."""
        self._check_cacheable()
        key = value if key is None else key
        dtype = self.compute_dtype
        value, key = ops.cast(value, dtype), ops.cast(key, dtype)
        k = self._rotate(self._key_dense(self._add_positions(key, "key")), 0)
        v = self._value_dense(self._add_positions(value, "value"))
        return ops.stack([k, v], axis=1)  # (B, 2, Tv, H_kv, K)

    def empty_cache(self, batch_size, length):
        """An all-zero self-attention cache `(B, 2, length, H_kv,
        key_dim)`."""
        self._check_cacheable()
        heads = self.num_key_value_heads
        shape = (batch_size, 2, length, heads, self.key_dim)
        return ops.zeros(shape, self.compute_dtype)

    def _cached_keys(self, cache, value, key, index, start):
        """`(k, v, new_cache, length, offset)` for a cached call."""
        self._check_cacheable()
        cache = ops.cast(cache, self.compute_dtype)
        length = ops.shape(cache)[2]
        if index is None:  # cross-attention over a precomputed memory
            return cache[:, 0], cache[:, 1], cache, length, None
        k_new = self._rotate(
            self._key_dense(self._add_positions(key, "key", start)), start
        )
        v_new = self._value_dense(self._add_positions(value, "value", start))
        at = (0, index, 0, 0)
        k = ops.slice_update(cache[:, 0], at, k_new)  # (B, T, H, K)
        v = ops.slice_update(cache[:, 1], at, v_new)
        return k, v, ops.stack([k, v], axis=1), length, index

    # -- shapes and config -----------------------------------------------
    def compute_output_shape(
        self, query_shape, value_shape=None, key_shape=None, **kwargs
    ):
        if value_shape is not None and key_shape is not None:
            check_key_value(value_shape, key_shape)
        tail = self._output_shape or (query_shape[-1],)
        return (*query_shape[:-1], *tail)

    def compute_output_spec(
        self, query, value=None, key=None, return_attention_scores=False, **kw
    ):
        value = query if value is None else value
        if key is not None:
            check_key_value(value.shape, key.shape)
        out = keras.KerasTensor(
            self.compute_output_shape(query.shape), dtype=self.compute_dtype
        )
        set_output_mask(out, kw.get("query_mask"))
        result = [out]
        if kw.get("cache") is not None:
            cache = kw["cache"]
            result.append(keras.KerasTensor(cache.shape, self.compute_dtype))
        if return_attention_scores:
            rank = len(query.shape)
            axes = [
                a + rank if a < 0 else a
                for a in (self._given_axes or range(1, rank - 1))
            ]
            free = [a for a in range(1, rank - 1) if a not in axes]
            keys = value.shape if kw.get("cache") is None else None
            shape = (
                query.shape[0],
                *(query.shape[i] for i in free),
                self.num_heads,
                *(query.shape[i] for i in axes),
                *(
                    (keys[i] for i in axes)
                    if keys is not None
                    else (kw["cache"].shape[2],)
                ),
            )
            result.append(keras.KerasTensor(shape, dtype=self.compute_dtype))
        return result[0] if len(result) == 1 else tuple(result)

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
