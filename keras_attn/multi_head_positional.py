"""`MultiHeadPositional`: multi-head attention with positions and g(·)."""

import inspect
import math

import keras
from keras import layers, ops

from keras_attn import _sublayers, masking
from keras_attn.learned_position_embedding import LearnedPositionEmbedding
from keras_attn.sinusoidal_position_encoding import (
    SinusoidalPositionEncoding,
)
from keras_attn.validation import (
    check_attention_masks,
    check_batch,
    check_features,
    check_key_value,
    check_rate,
    clone_initializer,
    positive_int,
    set_output_mask,
)

POSITIONS = ("sinusoidal", "learned", None)
FEED_FORWARDS = (None, "concat", "per_head")


class _EinsumDense(layers.EinsumDense):
    """`EinsumDense` whose float path adds the bias with `+`.

    Keras 3.15's TensorFlow `ops.add` takes a bias that squeezes to one
    axis for `tf.nn.bias_add` and guesses "channels first" when that axis
    matches the input's axis 1: a `(heads, 1)` bias (`key_dim=1`) added to
    `(B, T, heads, 1)` with `T == heads` lands on the time axis. `+` is
    plain broadcasting. Quantized calls are Keras's own (unchanged). It
    also passes a padding mask through, as `Dense` does.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A per-position projection keeps the time axis, so a padding mask
        # stays valid (as for `Dense`): Keras then has no mask to warn about
        # destroying when a masked input reaches it.
        self.supports_masking = True

    def quantize(self, mode=None, type_check=True, config=None):
        # Keras refuses subclasses (their `call` could differ from the
        # quantized one); this one changes only the float path's bias add.
        super().quantize(mode, type_check=False, config=config)

    def call(self, inputs, training=None):
        x = ops.einsum(self.equation, inputs, self.kernel)
        if self.bias is not None:
            x = x + ops.cast(self.bias, x.dtype)
        if self.activation is not None:
            x = self.activation(x)
        return x


@keras.saving.register_keras_serializable(package="keras_attn")
class MultiHeadPositional(layers.Layer):
    """Multi-head attention with position encodings and a post-attention g.

    Following the GRU-to-self-attention derivation (Cho's lectures; Vaswani
    et al. 2017), for query steps `x_t` and key/value steps `x_i`:

        h_t^n = Σ_i α_ti^n V^n(x_i + p(i))
        α_ti^n ∝ exp(Q^n(x_t + p(t)) · K^n(x_i + p(i)) / sqrt(key_dim))
        h_t = W_o [h_t^1; ...; h_t^H]             feed_forward=None
        h_t = W_o g([h_t^1; ...; h_t^H])          feed_forward="concat"
        h_t = W_o [g(h_t^1); ...; g(h_t^H)]       feed_forward="per_head"

    `p` is the position encoding (`"sinusoidal"`, `"learned"` or `None`),
    added to the query and to the key/value inputs, each at its own
    positions `0..T-1`. `g(z) = W_2 act(W_1 z + b_1) + b_2` is a two-layer
    network applied at every step; `"per_head"` shares one small `g`
    (`value_dim → feed_forward_dim → value_dim`) across heads, the cheaper
    variant. With `position=None, feed_forward=None` the layer computes
    exactly what `keras.layers.MultiHeadAttention` computes, and its weights
    have the same shapes (copy them across with `set_weights`).

    Args:
        num_heads: number of heads `H`.
        key_dim: size of each query/key head.
        value_dim: size of each value head. Defaults to `key_dim`.
        position: `"sinusoidal"`, `"learned"` or `None`. Defaults to
            `"sinusoidal"`.
        max_length: table size for `position="learned"` (required then).
            Defaults to `None`.
        feed_forward: `None`, `"concat"` or `"per_head"`. Defaults to `None`.
        feed_forward_dim: hidden width of `g`. Defaults to twice the input
            width of `g`.
        feed_forward_activation: activation of `g`. Defaults to `"relu"`.
        dropout: dropout rate on the attention weights. Defaults to `0.0`.
        use_bias: whether projections have biases. Defaults to `True`.
        output_dim: output width. Defaults to the query's width.
        output_shape: Keras's name for the output's trailing shape: an int
            or a tuple (e.g. `(4, 5)` gives `(B, Tq, 4, 5)`); not with
            `output_dim`. Defaults to `None`.
        kernel_initializer: Defaults to `"glorot_uniform"`.
        bias_initializer: Defaults to `"zeros"`.
        kernel_regularizer: Defaults to `None`.
        bias_regularizer: Defaults to `None`.
        kernel_constraint: Defaults to `None`.
        bias_constraint: Defaults to `None`.
        seed: seed of the attention dropout. Defaults to `None`.
        use_gate: gate each head's output by `sigmoid(W_g x_t + b_g)` (as
            `keras.layers.MultiHeadAttention(use_gate=True)`). Defaults to
            `False`.
        flash_attention: passed to `keras.ops.dot_product_attention`
            (`None`: the backend decides; `True` needs a backend kernel and
            no scores, no dropout). Defaults to `None`.
        sliding_window: each query attends only to keys within
            `sliding_window - 1` positions of its own (a symmetric band,
            as `keras.layers.MultiHeadAttention(sliding_window=...)`);
            with `use_causal_mask=True`, the causal sliding window of
            Mistral-style models. Defaults to `None` (full attention).
        attention_axes: the axes attention runs over, for inputs of any
            rank `(B, d_1, ..., d_n, features)` (as
            `keras.layers.MultiHeadAttention`'s): an int or a tuple of
            axes among `1..n` (negative counts from the end, `-2` being
            `d_n`). The other axes `d_i` are independent (batch-like);
            several attention axes are attended jointly. Defaults to
            `None`: all of `d_1..d_n`. Positions need a single attention
            axis; a cache, 3-D inputs.
        **kwargs: base layer arguments (`name`, `dtype`,
            `activity_regularizer`, ...).

    Call arguments:
        query: `(B, Tq, Dq)`.
        value: `(B, Tv, Dv)`; `None` means self-attention on `query`.
        key: `(B, Tv, Dk)`; defaults to `value`.
        query_mask, value_mask: boolean `(B, Tq)` / `(B, Tv)`; read from the
            Keras masks of `query` / `value` when not given.
        attention_mask: boolean `(B, Tq, Tv)`, `(Tq, Tv)` (every example)
            or per head `(B, H, Tq, Tv)`; `True` = may attend.
        use_causal_mask: query `t` only attends to keys `i <= t`.
        return_attention_scores: also return the weights `(B, H, Tq, Tv)`
            (for N-D inputs, Keras's layout `(B, <other axes>, H,
            <query attention axes>, <key attention axes>)`).
        training: whether dropout is active.
        mask: alias of `query_mask`, filled by Keras for `layer(x)`.
        cache: for incremental decoding, projected keys and values
            `(B, 2, T, H, key_dim)` (KerasHub's `CachedMultiHeadAttention`
            layout). With `cache_update_index=None` it is a precomputed
            memory (`compute_cache`) for cross-attention; with an index it
            is a causal self-attention cache (`empty_cache`): the new
            steps' keys and values are written at `cache_update_index`,
            their positions continue from it, and each attends to the
            cache up to its own position.
        cache_update_index: the position of `query`'s first step in the
            cache (an int or a scalar tensor).
        start_index: the position of `query`'s first step, for its
            position encoding, with a `cache`. Defaults to
            `cache_update_index`, or 0 for cross-attention (pass the step's
            position there when positions are on).

    Returns:
        `(B, Tq, output_dim)`; rows with no key to attend to (masked query,
        or every key masked) are zeros, never NaN. The query mask is
        propagated. Without scores requested and without active dropout
        the layer uses the fused `keras.ops.dot_product_attention` on JAX
        and PyTorch; on TensorFlow, which has no fused kernel for it, the
        explicit einsum path (scaled query, masked softmax, einsum).
        With a `cache`: `(output, new_cache)` (and the scores last).

    Example:

    >>> import numpy as np
    >>> layer = MultiHeadPositional(num_heads=2, key_dim=4)
    >>> tuple(layer(np.ones((3, 6, 8), "float32")).shape)
    (3, 6, 8)

    References:
        - [Vaswani et al. 2017](https://arxiv.org/abs/1706.03762)
    """

    # Backends on which `keras.ops.dot_product_attention` is worth taking.
    _fused_backends = ("jax", "torch")

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        position="sinusoidal",
        max_length=None,
        feed_forward=None,
        feed_forward_dim=None,
        feed_forward_activation="relu",
        dropout=0.0,
        use_bias=True,
        output_dim=None,
        output_shape=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        seed=None,
        use_gate=False,
        flash_attention=None,
        sliding_window=None,
        attention_axes=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        positive_int("num_heads", num_heads)
        positive_int("key_dim", key_dim)
        positive_int("value_dim", value_dim, allow_none=True)
        positive_int("feed_forward_dim", feed_forward_dim, allow_none=True)
        positive_int("output_dim", output_dim, allow_none=True)
        positive_int("sliding_window", sliding_window, allow_none=True)
        if output_shape is not None:
            dims = (
                tuple(output_shape)
                if isinstance(output_shape, (tuple, list))
                else (output_shape,)
            )
            if not dims or any(
                isinstance(d, bool) or not isinstance(d, int) or d <= 0
                for d in dims
            ):
                raise ValueError(
                    "Invalid `output_shape`: expected a positive integer or "
                    f"a tuple of them. Received: output_shape={output_shape!r}"
                )
            if output_dim is not None:
                raise ValueError(
                    "Give output_dim or output_shape, not both. Received: "
                    f"output_dim={output_dim}, output_shape={output_shape!r}"
                )
            output_shape = dims
        if position not in POSITIONS:
            raise ValueError(
                f"Expected position to be one of {POSITIONS}. "
                f"Received: position={position!r}"
            )
        if position == "learned":
            positive_int("max_length", max_length)
        else:
            positive_int("max_length", max_length, allow_none=True)
        if feed_forward not in FEED_FORWARDS:
            raise ValueError(
                f"Expected feed_forward to be one of {FEED_FORWARDS}. "
                f"Received: feed_forward={feed_forward!r}"
            )
        check_rate("dropout", dropout)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.position = position
        self.max_length = max_length
        self.feed_forward = feed_forward
        self.feed_forward_dim = feed_forward_dim
        self.feed_forward_activation = keras.activations.get(
            feed_forward_activation
        )
        self.dropout = dropout
        self.use_bias = use_bias
        self.output_dim = output_dim
        self.output_shape_ = output_shape  # Keras's name, as a tuple
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.seed = seed
        self.use_gate = use_gate
        self.flash_attention = flash_attention
        self.sliding_window = sliding_window
        self.attention_axes = _axes_argument(attention_axes)
        if flash_attention and dropout > 0:
            raise ValueError(
                "Dropout is not supported with flash attention. Received: "
                f"dropout={dropout}, flash_attention={flash_attention}"
            )
        self.supports_masking = True

    # -- weights ---------------------------------------------------------
    def _dense(
        self,
        equation,
        output_shape,
        bias_axes,
        name,
        input_shape,
        activation=None,
    ):
        # `equation=None`: a `Dense` on the last axis (any rank), else an
        # `EinsumDense` as in keras.layers.MultiHeadAttention.
        kind = layers.Dense if equation is None else _EinsumDense
        shape = dict(units=output_shape, use_bias=self.use_bias)
        if equation is not None:
            shape = dict(
                equation=equation,
                output_shape=output_shape,
                bias_axes=bias_axes,
            )
        dense = kind(
            **shape,
            activation=activation,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            kernel_regularizer=self.kernel_regularizer,
            bias_regularizer=self.bias_regularizer,
            kernel_constraint=self.kernel_constraint,
            bias_constraint=self.bias_constraint,
            dtype=self.dtype_policy,
            name=name,
        )
        dense.build(input_shape)
        return dense

    # Keras MultiHeadAttention's names for the projection sublayers.
    query_dense = property(lambda self: self._query_dense)
    key_dense = property(lambda self: self._key_dense)
    value_dense = property(lambda self: self._value_dense)
    output_dense = property(lambda self: self._output_dense)

    # Keras MultiHeadAttention's private attributes, which its subclasses
    # (KerasHub's among them) read.
    _num_heads = property(lambda self: self.num_heads)
    _key_dim = property(lambda self: self.key_dim)
    _value_dim = property(lambda self: self.value_dim or self.key_dim)
    _sliding_window = property(lambda self: self.sliding_window)
    _attention_axes = property(lambda self: self.attention_axes)

    # The projection weights under the names of 0.1 (read-only views).
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

    def _denses(self):
        return [
            d
            for d in (
                self._query_dense,
                self._key_dense,
                self._gate_dense,
                self._value_dense,
                self._output_dense,
                self._ff_1,
                self._ff_2,
            )
            if d is not None
        ]

    def load_own_variables(self, store):
        """Also load `.keras` files written by keras_attn 0.1, whose layer
        held the projection weights itself (in the order of
        `get_weights()`, which is unchanged)."""
        denses = self._denses()
        legacy = [v for dense in denses for v in dense.variables]
        _sublayers.load_own_variables(
            self, store, legacy, denses, super().load_own_variables
        )

    def enable_lora(self, rank, targets=("query", "value")):
        """LoRA (Hu et al. 2021) on the projections named in `targets`
        (`"query"`, `"key"`, `"value"`, `"attention_output"`), as KerasHub
        does for query and value by default; the other weights freeze."""
        for dense in (
            self._query_dense,
            self._key_dense,
            self._value_dense,
            self._output_dense,
            self._ff_1,
            self._ff_2,
        ):
            if dense is None:
                continue
            if dense.name in targets:
                dense.enable_lora(rank)
            else:
                dense.trainable = False

    def _position_layer(self, name):
        if self.position == "sinusoidal":
            return SinusoidalPositionEncoding(
                dtype=self.dtype_policy, name=name
            )
        return LearnedPositionEmbedding(
            self.max_length, dtype=self.dtype_policy, name=name
        )

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
        self._split_axes(len(query_shape))  # checks attention_axes
        # N-D inputs are attended as (batch · other axes, attention axes
        # flattened, features): the weights are those of the 3-D layer.
        query_shape, value_shape, key_shape = (
            (None, None, shape[-1]) if len(shape) > 3 else tuple(shape)
            for shape in (query_shape, value_shape, key_shape)
        )
        heads, dk = self.num_heads, self.key_dim
        dv = self.value_dim or self.key_dim
        dq_in, dk_in, dv_in = query_shape[-1], key_shape[-1], value_shape[-1]
        self._widths = {"query": dq_in, "key": dk_in, "value": dv_in}
        out_dims = self._out_dims(dq_in)
        out_letters = "efghij"[: len(out_dims)]
        # Projections: `EinsumDense` sublayers named and shaped like
        # keras.layers.MultiHeadAttention's, so that quantization, LoRA,
        # dtype-policy maps and layouts come from Keras.
        bias = "de" if self.use_bias else None
        self._query_dense = self._dense(
            "abc,cde->abde", (None, heads, dk), bias, "query", query_shape
        )
        self._key_dense = self._dense(
            "abc,cde->abde", (None, heads, dk), bias, "key", key_shape
        )
        self._gate_dense = None
        if self.use_gate:  # sigmoid(W_g x_t) gates each head's output
            self._gate_dense = self._dense(
                "abc,cde->abde",
                (None, heads, dv),
                bias,
                "gate",
                query_shape,
                activation="sigmoid",
            )
        self._value_dense = self._dense(
            "abc,cde->abde", (None, heads, dv), bias, "value", value_shape
        )
        self._output_dense = self._dense(
            f"abcd,cd{out_letters}->ab{out_letters}",
            (None, *out_dims),
            out_letters if self.use_bias else None,
            "attention_output",
            (query_shape[0], query_shape[1], heads, dv),
        )
        # Post-attention network g, on the last axis.
        self._ff_1 = self._ff_2 = None
        if self.feed_forward is not None:
            width = heads * dv if self.feed_forward == "concat" else dv
            hidden = self.feed_forward_dim or 2 * width
            self._ff_1 = self._dense(
                None,
                hidden,
                None,
                "feed_forward_1",
                (None, width),
                activation=self.feed_forward_activation,
            )
            self._ff_2 = self._dense(
                None, width, None, "feed_forward_2", (None, hidden)
            )
        # Positions. A sinusoidal encoding fits any width; a learned table
        # is created per distinct input width (one for self-attention).
        self.query_position = self.value_position = self.key_position = None
        self._stream_positions = {}
        if self.position is not None:
            self.query_position = self._position_layer("query_position")
            self.query_position.build(query_shape)
            by_width = {dq_in: self.query_position}
            if self.position == "learned" and dv_in not in by_width:
                self.value_position = self._position_layer("value_position")
                self.value_position.build(value_shape)
                by_width[dv_in] = self.value_position
            if self.position == "learned" and dk_in not in by_width:
                self.key_position = self._position_layer("key_position")
                self.key_position.build(key_shape)
                by_width[dk_in] = self.key_position
            for stream, width in (
                ("query", dq_in),
                ("value", dv_in),
                ("key", dk_in),
            ):
                self._stream_positions[stream] = by_width.get(
                    width, self.query_position
                )
        self.dropout_layer = layers.Dropout(
            self.dropout,
            seed=self.seed,
            dtype=self.dtype_policy,
            name="dropout",
        )
        self.dropout_layer.build(None)
        self.built = True

    # -- call ------------------------------------------------------------
    def _add_positions(self, x, stream, start_index=0):
        if self.position is None:
            return x
        return x + self._stream_positions[stream](x, start_index=start_index)

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
    ):
        """Attention over projected heads: the subclassing hook of
        `keras.layers.MultiHeadAttention`, same arguments.

        Args:
            query: `(B, Tq, H, K)`; key: `(B, Tv, H, K)`; value:
                `(B, Tv, H, Dv)`, positions already added. For N-D inputs
                (`attention_axes`) the hook sees them regrouped this way:
                the other axes in `B`, the attention axes flattened.
            attention_mask: boolean, broadcastable to `(B, H, Tq, Tv)`
                (e.g. `(B, 1, 1, Tv)` for padding alone).
            use_causal_mask: also mask keys after each query. The fused
                op gets it as `is_causal` (no dense mask is built for it);
                the explicit path combines it with `attention_mask`.

        Returns:
            `(context (B, Tq, H, Dv), weights (B, H, Tq, Tv) or None)`.
        """
        q, k, v, head_mask = query, key, value, attention_mask
        dtype = q.dtype
        if self.flash_attention and return_attention_scores:
            raise ValueError(
                "Returning attention scores is not supported when flash "
                "attention is enabled. Please disable flash attention to "
                "access attention scores."
            )
        scale = 1.0 / math.sqrt(self.key_dim)
        dropout_active = self.dropout > 0 and bool(training)
        weights = None
        # The fused op needs value heads as wide as key heads on JAX. On
        # TensorFlow it has no fused kernel: it runs the same two einsums as
        # the explicit path but scales the (B, H, Tq, Tv) logits instead of
        # q, which is slower (benchmarks/mhp_paths.py), so TF takes the
        # explicit path.
        fusable = (
            self.value_dim or self.key_dim
        ) == self.key_dim and keras.backend.backend() in self._fused_backends
        if self.flash_attention:
            fusable = True  # as Keras: the backend's fused op, or its error
        if return_attention_scores or dropout_active or not fusable:
            if use_causal_mask:
                causal = masking.causal_mask(ops.shape(q)[1], ops.shape(k)[1])[
                    None, None
                ]  # (1, 1, Tq, Tv)
                head_mask = (
                    causal
                    if head_mask is None
                    else ops.logical_and(ops.cast(head_mask, "bool"), causal)
                )
            logits = ops.einsum(
                "bqhk,bvhk->bhqv", q * ops.cast(scale, dtype), k
            )  # (B, H, Tq, Tv)
            weights = masking.masked_softmax(logits, head_mask)
            dropped = self.dropout_layer(weights, training=training)
            context = ops.einsum("bhqv,bvhd->bqhd", dropped, v)  # (B,Tq,H,Dv)
        else:
            fused_mask = None
            if head_mask is not None:  # rank 4, as broadcastable as given
                fused_mask = ops.cast(head_mask, "bool")
            context = ops.dot_product_attention(
                q,
                k,
                v,
                mask=fused_mask,
                scale=scale,
                is_causal=bool(use_causal_mask),
                flash_attention=self.flash_attention,
            )  # (B, Tq, H, Dv)
        return context, weights

    def _g(self, x):
        return self._ff_2(self._ff_1(x))  # W_2 act(W_1 x + b_1) + b_2

    def call(
        self,
        query,
        value=None,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        mask=None,
        cache=None,
        cache_update_index=None,
        start_index=None,
    ):
        if query_mask is None:
            # Keras fills `mask` (not `query_mask`) when `query` is the only
            # tensor argument, as in self-attention `layer(x)`.
            query_mask = mask
        for name, tensor in (("query", query), ("value", value), ("key", key)):
            if tensor is not None and len(tensor.shape) < 3:
                raise ValueError(
                    f"Expected {name} of shape (batch, time, features) (or "
                    "(batch, d_1, ..., d_n, features)). Received: "
                    f"{name}.shape={tuple(tensor.shape)}"
                )
        if len(query.shape) != 3:
            if cache is not None:
                raise ValueError(
                    "A cache needs query of shape (batch, time, features). "
                    f"Received: query.shape={tuple(query.shape)}"
                )
            return self._call_nd(
                query,
                value,
                key,
                query_mask,
                value_mask,
                key_mask,
                attention_mask,
                use_causal_mask,
                return_attention_scores,
                training,
            )
        if cache is not None:
            return self._call_cached(
                query,
                value,
                cache,
                cache_update_index,
                query_mask,
                value_mask,
                training,
                return_attention_scores,
                start_index,
            )
        for name, given in (
            ("cache_update_index", cache_update_index),
            ("start_index", start_index),
        ):
            if given is not None:
                raise ValueError(
                    f"{name} needs a cache. Received: cache=None, "
                    f"{name}={given!r}"
                )
        if value is None:
            value, value_mask = query, query_mask
        if key is None:
            key, key_mask = value, None
        check_key_value(value.shape, key.shape)
        if key_mask is not None:
            value_mask = (
                key_mask
                if value_mask is None
                else ops.logical_and(
                    ops.cast(value_mask, "bool"), ops.cast(key_mask, "bool")
                )
            )
        dtype = self.compute_dtype
        query, value, key = (ops.cast(t, dtype) for t in (query, value, key))
        check_batch(query, value, key)
        check_features(self._widths, query=query, value=value, key=key)
        check_attention_masks(
            query, key, query_mask, value_mask, attention_mask, self.num_heads
        )
        head_attention_mask = None
        if attention_mask is not None and len(attention_mask.shape) == 4:
            head_attention_mask = ops.cast(attention_mask, "bool")
            attention_mask = None  # (B, H, Tq, Tv): applied per head below
        elif attention_mask is not None and len(attention_mask.shape) == 2:
            attention_mask = attention_mask[None]  # (1, Tq, Tv)
        if self.sliding_window is not None:
            band = self._band(
                ops.arange(ops.shape(query)[1]), ops.shape(key)[1]
            )  # (1, Tq, Tv)
            attention_mask = (
                band
                if attention_mask is None
                else ops.logical_and(ops.cast(attention_mask, "bool"), band)
            )
        q = self._query_dense(self._add_positions(query, "query"))  # (B,Tq,H,K)
        k = self._key_dense(self._add_positions(key, "key"))  # (B, Tv, H, K)
        v = self._value_dense(
            self._add_positions(value, "value")
        )  # (B,Tv,H,Dv)
        if (
            attention_mask is None
            and head_attention_mask is None
            and self.sliding_window is None
            and (not use_causal_mask or self._hook_takes_causal())
        ):
            # Padding and causality only: no (Tq, Tv) mask is built. Keys'
            # padding stays `(B, 1, 1, Tv)`, causality goes to the fused op
            # as `is_causal`, padded query rows are zeroed afterwards.
            return self._attend_lean(
                query,
                q,
                k,
                v,
                query_mask,
                value_mask,
                use_causal_mask,
                training,
                return_attention_scores,
            )
        mask = masking.merge_masks(
            ops.shape(query)[1],
            ops.shape(key)[1],
            query_mask=query_mask,
            value_mask=value_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
        )  # (B|1, Tq|1, Tv|1) or None
        head_mask = None if mask is None else mask[:, None]  # (B|1,1,..)
        if head_attention_mask is not None:
            head_mask = (
                head_attention_mask
                if head_mask is None
                else ops.logical_and(head_mask, head_attention_mask)
            )  # (B, H, Tq, Tv)
        context, weights = self._compute_attention(
            q, k, v, head_mask, training, return_attention_scores
        )  # (B, Tq, H, Dv), (B, H, Tq, Tv) or None
        output = self._output(
            query, context, _rows_with_a_key(head_mask), query_mask, 0
        )
        if return_attention_scores:
            return output, weights
        return output

    def _hook_takes_causal(self):
        """Whether `_compute_attention` (perhaps a subclass's, written for
        an older Keras) accepts `use_causal_mask`; if not, causality is
        merged into the mask it gets, as before."""
        params = inspect.signature(self._compute_attention).parameters
        return "use_causal_mask" in params or any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
        )

    def _attend_lean(
        self,
        query,
        q,
        k,
        v,
        query_mask,
        value_mask,
        use_causal_mask,
        training,
        return_attention_scores,
    ):
        head_mask = None
        if value_mask is not None:
            head_mask = ops.cast(value_mask, "bool")[:, None, None, :]
        causal = {"use_causal_mask": True} if use_causal_mask else {}
        context, weights = self._compute_attention(
            q, k, v, head_mask, training, return_attention_scores, **causal
        )  # (B, Tq, H, Dv), (B, H, Tq, Tv) or None
        rows = None  # (B|1, Tq|1): the query rows with a key to attend to
        if value_mask is not None:
            keys = ops.cast(value_mask, "bool")  # (B, Tv)
            if use_causal_mask:  # row t sees keys 0..t
                seen = ops.cumsum(ops.cast(keys, "int32"), axis=-1) > 0
                last = ops.shape(k)[1] - 1
                at = ops.minimum(ops.arange(ops.shape(q)[1]), last)
                rows = ops.take(seen, at, axis=1)  # (B, Tq)
            else:
                rows = ops.any(keys, axis=-1, keepdims=True)  # (B, 1)
        if query_mask is not None:
            valid_query = ops.cast(query_mask, "bool")  # (B, Tq)
            rows = (
                valid_query
                if rows is None
                else ops.logical_and(rows, valid_query)
            )
            if weights is not None:  # padded query rows attend to nothing
                weights = ops.where(
                    valid_query[:, None, :, None],
                    weights,
                    ops.zeros_like(weights),
                )
        output = self._output(query, context, rows, query_mask, 0)
        if return_attention_scores:
            return output, weights
        return output

    def _output(self, query, context, rows, query_mask, start_index):
        """Gate, g, the output projection; rows with no key zeroed
        (`rows`: boolean, broadcastable to `(B, Tq)`, or `None`)."""
        if self._gate_dense is not None:
            gate = self._gate_dense(
                self._add_positions(query, "query", start_index)
            )
            context = ops.multiply(context, gate)  # (B, Tq, H, Dv)
        if self.feed_forward == "per_head":
            context = self._g(context)  # (B, Tq, H, Dv)
        elif self.feed_forward == "concat":
            b, t = ops.shape(context)[0], ops.shape(context)[1]
            flat = ops.reshape(context, (b, t, -1))  # (B, Tq, H*Dv)
            context = ops.reshape(self._g(flat), ops.shape(context))
        output = self._output_dense(context)  # (B, Tq, O)
        if rows is not None:
            row_valid = ops.broadcast_to(rows, ops.shape(output)[:2])
            for _ in range(len(output.shape) - 2):  # one per output axis
                row_valid = row_valid[..., None]
            output = ops.where(row_valid, output, ops.zeros_like(output))
        set_output_mask(output, query_mask)
        return output

    def _band(self, query_positions, key_length):
        """`|i - j| < sliding_window` for query positions `i` and keys
        `0..key_length-1`, `(1, Tq, Tv)`."""
        rows = ops.cast(query_positions, "int32")[:, None]
        cols = ops.arange(key_length, dtype="int32")[None, :]
        return ops.less(ops.abs(rows - cols), self.sliding_window)[None]

    # -- incremental decoding ------------------------------------------
    def _check_cacheable(self):
        if (self.value_dim or self.key_dim) != self.key_dim:
            raise ValueError(
                "A key/value cache needs value heads as wide as key heads. "
                f"Received: key_dim={self.key_dim}, value_dim={self.value_dim}"
            )

    def compute_cache(self, value, key=None):
        """Projected keys and values of `value` `(B, Tv, D)` (positions
        `0..Tv-1`), `(B, 2, Tv, H, key_dim)`: the memory of a
        cross-attention, computed once and passed as `cache` with
        `cache_update_index=None` at every decoding step."""
        self._check_cacheable()
        key = value if key is None else key
        dtype = self.compute_dtype
        value, key = ops.cast(value, dtype), ops.cast(key, dtype)
        k = self._key_dense(self._add_positions(key, "key"))
        v = self._value_dense(self._add_positions(value, "value"))
        return ops.stack([k, v], axis=1)  # (B, 2, Tv, H, K)

    def empty_cache(self, batch_size, length):
        """An all-zero self-attention cache for `length` positions,
        `(B, 2, length, H, key_dim)`, to fill with `cache_update_index`."""
        self._check_cacheable()
        return ops.zeros(
            (batch_size, 2, length, self.num_heads, self.key_dim),
            self.compute_dtype,
        )

    def _call_cached(
        self,
        query,
        value,
        cache,
        index,
        query_mask,
        value_mask,
        training,
        return_attention_scores,
        start_index=None,
    ):
        self._check_cacheable()
        dtype = self.compute_dtype
        query = ops.cast(query, dtype)
        cache = ops.cast(cache, dtype)
        start = start_index
        if start is None:
            start = 0 if index is None else index
        q = self._query_dense(self._add_positions(query, "query", start))
        length = ops.shape(cache)[2]
        if index is None:  # cross-attention over a precomputed memory
            k, v = cache[:, 0], cache[:, 1]  # (B, Tv, H, K)
            attention_mask = None
        else:  # causal self-attention: write the new steps, then attend
            value = query if value is None else ops.cast(value, dtype)
            k_new = self._key_dense(self._add_positions(value, "key", start))
            v_new = self._value_dense(
                self._add_positions(value, "value", start)
            )
            at = (0, index, 0, 0)
            k = ops.slice_update(cache[:, 0], at, k_new)  # (B, T, H, K)
            v = ops.slice_update(cache[:, 1], at, v_new)
            cache = ops.stack([k, v], axis=1)
            steps = ops.shape(query)[1]
            q_pos = ops.arange(steps) + index  # (Tq,) absolute positions
            attention_mask = ops.arange(length)[None, :] <= q_pos[:, None]
            attention_mask = attention_mask[None]  # (1, Tq, T)
            if self.sliding_window is not None:
                band = self._band(q_pos, length)
                attention_mask = ops.logical_and(attention_mask, band)
        mask = masking.merge_masks(
            ops.shape(query)[1],
            length,
            query_mask=query_mask,
            value_mask=value_mask,
            attention_mask=attention_mask,
        )
        head_mask = None if mask is None else mask[:, None]
        context, weights = self._compute_attention(
            q, k, v, head_mask, training, return_attention_scores
        )
        output = self._output(
            query, context, _rows_with_a_key(head_mask), query_mask, start
        )
        if return_attention_scores:
            return output, cache, weights
        return output, cache

    def compute_output_shape(
        self, query_shape, value_shape=None, key_shape=None, **kwargs
    ):
        if value_shape is not None and key_shape is not None:
            check_key_value(value_shape, key_shape)
        return (*query_shape[:-1], *self._out_dims(query_shape[-1]))

    def _out_dims(self, query_width):
        """The output's trailing dimensions (one, unless `output_shape` is
        a tuple)."""
        if self.output_shape_ is not None:
            return self.output_shape_
        return (self.output_dim or query_width,)

    def compute_output_spec(
        self,
        query,
        value=None,
        key=None,
        return_attention_scores=False,
        **kwargs,
    ):
        value = query if value is None else value
        if key is not None:
            check_key_value(value.shape, key.shape)
        out = keras.KerasTensor(
            self.compute_output_shape(query.shape), dtype=self.compute_dtype
        )
        set_output_mask(out, kwargs.get("query_mask"))
        if return_attention_scores:
            free, axes = self._split_axes(len(query.shape))
            shape = (
                query.shape[0],
                *(query.shape[i] for i in free),
                self.num_heads,
                *(query.shape[i] for i in axes),
                *(value.shape[i] for i in axes),
            )
            return out, keras.KerasTensor(shape, dtype=self.compute_dtype)
        return out

    # -- inputs of any rank ----------------------------------------------
    def _split_axes(self, rank):
        """`(other axes, attention axes)` of an input of `rank`, as
        lists of non-negative axes; raises for axes the rank lacks."""
        inner = list(range(1, rank - 1))
        if self.attention_axes is None:
            return [], inner
        axes = [a + rank if a < 0 else a for a in self.attention_axes]
        if any(a not in inner for a in axes) or len(set(axes)) < len(axes):
            raise ValueError(
                f"Expected attention_axes among {tuple(inner)} (or "
                f"{tuple(a - rank for a in inner)}) for inputs of rank "
                f"{rank}. Received: attention_axes={self.attention_axes!r}"
            )
        if self.position is not None and len(axes) > 1:
            raise ValueError(
                "Positions run along one axis: give a single attention axis "
                "or position=None. Received: "
                f"attention_axes={self.attention_axes!r}, "
                f"position={self.position!r}"
            )
        return [a for a in inner if a not in axes], axes

    def _call_nd(
        self,
        query,
        value,
        key,
        query_mask,
        value_mask,
        key_mask,
        attention_mask,
        use_causal_mask,
        return_attention_scores,
        training,
    ):
        """Attention over `attention_axes` of `(B, d_1..d_n, D)` inputs:
        the other axes join the batch, the attention axes are flattened
        (row-major), and the 3-D layer runs; outputs and scores are
        reshaped back (scores in Keras's layout)."""
        if value is None:
            value, value_mask = query, query_mask
        if key is None:
            key, key_mask = value, None
        check_key_value(value.shape, key.shape)
        rank = len(query.shape)
        if len(value.shape) != rank:
            raise ValueError(
                "Expected query and value of the same rank. Received: "
                f"query.shape={tuple(query.shape)}, "
                f"value.shape={tuple(value.shape)}"
            )
        free, axes = self._split_axes(rank)
        for i in free:
            q_dim, v_dim = query.shape[i], value.shape[i]
            if None not in (q_dim, v_dim) and q_dim != v_dim:
                raise ValueError(
                    f"Expected query and value to agree on axis {i}, which "
                    "is not an attention axis. Received: "
                    f"query.shape={tuple(query.shape)}, "
                    f"value.shape={tuple(value.shape)}"
                )
        order = [0, *free, *axes]  # the non-feature axes, regrouped
        q_shape, v_shape = ops.shape(query), ops.shape(value)
        lq = _product([q_shape[i] for i in axes])
        lv = _product([v_shape[i] for i in axes])

        def flat(x, length, features=True):
            x = ops.transpose(x, order + [rank - 1] if features else order)
            return ops.reshape(
                x, (-1, length, ops.shape(x)[-1]) if features else (-1, length)
            )

        def flat_mask(m, length):
            return (
                None if m is None else flat(ops.cast(m, "bool"), length, False)
            )

        head_mask = None
        if attention_mask is not None:  # Keras's broadcasting rule
            head_mask = ops.cast(attention_mask, "bool")
            scores_rank = 2 + len(free) + 2 * len(axes)
            for _ in range(scores_rank - len(head_mask.shape)):
                head_mask = ops.expand_dims(head_mask, -2 * len(axes) - 1)
            head_mask = ops.broadcast_to(
                head_mask,
                (
                    q_shape[0],
                    *(q_shape[i] for i in free),
                    self.num_heads,
                    *(q_shape[i] for i in axes),
                    *(v_shape[i] for i in axes),
                ),
            )
            head_mask = ops.reshape(head_mask, (-1, self.num_heads, lq, lv))
        result = self.call(
            flat(query, lq),
            flat(value, lv),
            flat(key, lv),
            query_mask=flat_mask(query_mask, lq),
            value_mask=flat_mask(value_mask, lv),
            key_mask=flat_mask(key_mask, lv),
            attention_mask=head_mask,
            use_causal_mask=use_causal_mask,
            return_attention_scores=return_attention_scores,
            training=training,
        )
        output, weights = result if return_attention_scores else (result, None)
        out_dims = tuple(output.shape[2:])
        grouped = [q_shape[i] for i in order]
        output = ops.reshape(output, (*grouped, *out_dims))
        back = [order.index(i) for i in range(rank - 1)]
        tail = list(range(rank - 1, rank - 1 + len(out_dims)))
        output = ops.transpose(output, back + tail)
        set_output_mask(output, query_mask)
        if not return_attention_scores:
            return output
        weights = ops.reshape(
            weights,
            (
                q_shape[0],
                *(q_shape[i] for i in free),
                self.num_heads,
                *(q_shape[i] for i in axes),
                *(v_shape[i] for i in axes),
            ),
        )
        return output, weights

    def get_config(self):
        return {
            **super().get_config(),
            "dtype": _sublayers.dtype_config(
                self, self._denses() if self.built else []
            ),
            "num_heads": self.num_heads,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            "position": self.position,
            "max_length": self.max_length,
            "feed_forward": self.feed_forward,
            "feed_forward_dim": self.feed_forward_dim,
            "feed_forward_activation": keras.activations.serialize(
                self.feed_forward_activation
            ),
            "dropout": self.dropout,
            "use_bias": self.use_bias,
            "output_dim": self.output_dim,
            "output_shape": self.output_shape_,
            "kernel_initializer": keras.initializers.serialize(
                self.kernel_initializer
            ),
            "bias_initializer": keras.initializers.serialize(
                self.bias_initializer
            ),
            "kernel_regularizer": keras.regularizers.serialize(
                self.kernel_regularizer
            ),
            "bias_regularizer": keras.regularizers.serialize(
                self.bias_regularizer
            ),
            "kernel_constraint": keras.constraints.serialize(
                self.kernel_constraint
            ),
            "bias_constraint": keras.constraints.serialize(
                self.bias_constraint
            ),
            "seed": self.seed,
            "use_gate": self.use_gate,
            "flash_attention": self.flash_attention,
            "sliding_window": self.sliding_window,
            "attention_axes": self.attention_axes,
        }


def _rows_with_a_key(head_mask):
    """`(B|1, Tq|1)`: query rows where some head has a key to attend to."""
    if head_mask is None:
        return None
    return ops.any(masking.any_valid(head_mask), axis=1)


def _axes_argument(attention_axes):
    """`attention_axes` as a tuple of ints (or `None`), checked."""
    if attention_axes is None:
        return None
    axes = (
        (attention_axes,)
        if isinstance(attention_axes, int)
        else tuple(attention_axes)
    )
    if not axes or any(
        isinstance(a, bool) or not isinstance(a, int) or a == 0 for a in axes
    ):
        raise ValueError(
            "Expected attention_axes to be a non-zero int or a tuple of "
            f"them (axis 0 is the batch). Received: "
            f"attention_axes={attention_axes!r}"
        )
    return axes


def _product(dims):
    """The product of static ints and/or dynamic scalar dimensions."""
    out = 1
    for d in dims:
        out = out * d
    return out
