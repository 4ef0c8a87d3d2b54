"""`MultiHeadPositional`: Keras's `MultiHeadAttention` with positions,
grouped key/value heads, a feed-forward g and a key/value cache."""

import keras
from keras import layers, ops

from keras_attn.layers import _attention_kernel as kernel
from keras_attn.layers import _multi_head_arguments as arguments
from keras_attn.layers import _multi_head_inputs as inputs
from keras_attn.layers import _multi_head_masks as masks
from keras_attn.layers import _multi_head_positions as positions
from keras_attn.layers import _row_decoding as row_decoding
from keras_attn.layers import _sublayers, cache_policies
from keras_attn.legacy import layers as legacy_layers
from keras_attn.ops import heads, masking
from keras_attn.validation import (
    set_output_mask,
)

POSITIONS = arguments.POSITIONS
FEED_FORWARDS = arguments.FEED_FORWARDS


@legacy_layers.multi_head_names
@keras.saving.register_keras_serializable(package="keras_attn")
class MultiHeadPositional(layers.MultiHeadAttention):
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
    by angles of their positions (a `RotaryEmbedding` layer), so scores
    depend on `i − j`; `"alibi"` (Press et al. 2022) adds `−m_h |i − j|` to
    head `h`'s scores (`AlibiBias`). Both need `(B, T, D)` inputs.

    With `num_key_value_heads < num_heads` (grouped-query attention;
    Ainslie et al. 2023; `1` is multi-query) keys and values have fewer
    heads, each shared by `num_heads / num_key_value_heads` query heads:
    the weights of `keras.layers.GroupQueryAttention` and a cache that
    many times smaller.

    Which kernel runs: the backend's fused `dot_product_attention` (flash
    where Keras allows it) where Keras's `MultiHeadAttention` uses it, that
    is unless dropout is active or scores are returned, with a score bias
    (`"alibi"`, `attention_bias`, or `score_bias` overridden) as its
    `bias=`; Keras's einsums and masked softmax otherwise. Both scale the
    query before its product with the keys, so that float16 does not
    overflow where Keras's fused call does. `g(z) = W_2 act(W_1 z + b_1) + b_2`;
    `"per_head"` shares one `g` (`value_dim → feed_forward_dim →
    value_dim`) across heads. With `position=None, feed_forward=None` the
    layer computes what `MultiHeadAttention` computes with the same weights,
    except that a query with no key to attend to (a masked query, or every
    key masked) gets zeros instead of an average of the values, and padded
    positions are selected out before the projections, so that NaN or inf
    there never reaches a valid output.

    Args:
        {arguments}

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
            With a `cache_policy`, the policy's state (`empty_cache`),
            masked by positions: the new steps' padding is `query_mask`.
        cache_update_index: position of `query`'s first step in the cache,
            or a position a row `(B,)` (full cache only): each row's steps
            are written, positioned and masked at its own.
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

    # Keras's private members touched, and why: the hooks overridden,
    # `_build_attention` (grouped heads), `_compute_attention` (g) and
    # `_masked_softmax` (masked keys weigh zero); `_key_dense`,
    # `_value_dense`, `_gate_dense` and `_tracker` (grouped heads replace
    # Keras's key and value projections, in its weight order);
    # `_get_common_kwargs_for_sublayer` (initializers etc. for ours);
    # `_flash_attention` (global switch included); `_dot_product_equation`,
    # `_combine_equation`, `_dropout_layer`, `_compute_attention_mask`.

    def __init__(self, *args, **kwargs):
        given, rest = arguments.bind(self, args, kwargs)
        for_keras, own = arguments.resolve(given)
        super().__init__(**for_keras, **rest)
        for name, value in own.items():
            setattr(self, name, value)
        self._given_axes = for_keras["attention_axes"]
        self._window = for_keras["sliding_window"]
        self._output_tail = for_keras["output_shape"]
        self._ff_1 = self._ff_2 = None
        self.query_position = self.key_position = None
        self.value_position = self.rotary = self.alibi = None

    __init__.__signature__ = arguments.SIGNATURE

    # -- Building: Keras's projections, grouped heads, g, positions. ----

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        inputs.check_build_shapes(query_shape, value_shape, key_shape)
        self._rank = len(query_shape)
        self._position_axis = inputs.check_axes(
            self._given_axes, self.position, self._rank
        )
        self._build_shapes = {"key": key_shape, "value": value_shape}
        super().build(query_shape, value_shape, key_shape)
        self._widths = dict(
            query=query_shape[-1], value=value_shape[-1], key=key_shape[-1]
        )
        self._build_feed_forward()
        self._stream_positions = positions.build(self)

    def _build_attention(self, rank):
        # Keras's `MultiHeadAttention.build` calls this between the value
        # and output projections. With grouped heads the key and value
        # projections get `num_key_value_heads` heads, as in Keras's
        # `GroupedQueryAttention`, in Keras's weight order (query, key,
        # gate, value, output).
        if self.num_key_value_heads != self.num_heads:
            gate = getattr(self, "_gate_dense", None)
            for old in (self._key_dense, gate, self._value_dense):
                if old is not None:
                    self._tracker.untrack(old)
            for name in ("key", "value"):
                old = getattr(self, f"_{name}_dense")
                new = _sublayers.fewer_heads(old, self.num_key_value_heads)
                # A fresh copy of the initializers for each projection:
                # one seedless copy gives equal shapes equal values.
                common = self._get_common_kwargs_for_sublayer()
                new = layers.EinsumDense(**new, name=name, **common)
                new.build(self._build_shapes[name])
                setattr(self, f"_{name}_dense", new)
                if name == "key" and gate is not None:
                    self._gate_dense = gate  # tracked again, after the key
        super()._build_attention(rank)

    def _build_feed_forward(self):
        """`g`'s two `Dense` layers (`None` without a feed-forward)."""
        if self.feed_forward is None:
            return
        width = self.value_dim * (
            self.num_heads if self.feed_forward == "concat" else 1
        )
        hidden = self.feed_forward_dim or 2 * width

        def common():  # fresh initializer copies for each Dense
            kwargs = self._get_common_kwargs_for_sublayer()
            del kwargs["activity_regularizer"]  # g's output is not the layer's
            return kwargs

        self._ff_1, self._ff_2 = _sublayers.two_dense(
            width, hidden, self.feed_forward_activation, "feed_forward", common
        )

    # -- The call, in four steps. ----------------------------------------

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
        step = inputs.resolve_inputs(
            self,
            query,
            value,
            key,
            query_mask if query_mask is not None else mask,
            (value_mask, key_mask, attention_mask),
            cache,
            cache_update_index,
            start_index,
        )
        q, gate = self._queries(step)
        k, v, cache, length, offset, step = self._keys_and_values(
            step, cache, cache_update_index
        )
        own_kernel = (
            type(self)._compute_attention
            is MultiHeadPositional._compute_attention
        )
        full_mask, rows, lean = masks.merged_mask(
            self, step, k, length, offset, use_causal_mask, own_kernel
        )
        extra = {"use_causal_mask": True} if lean else {}
        bias = positions.total_bias(self, q, step, length, attention_bias)
        if bias is not None:
            extra["attention_bias"] = bias
        context, scores = self._compute_attention(
            q,
            heads.repeat_heads(k, self.num_heads),  # (B, Tv, H, K)
            heads.repeat_heads(v, self.num_heads),
            full_mask,
            training,
            return_attention_scores,
            **extra,
        )  # (B, Tq, H, Dv), (B, H, Tq, Tv) or None
        if lean and scores is not None and rows is not None:
            scores = masking.zero_rows(scores, rows[:, None])
        if gate is not None:
            context = ops.multiply(context, gate)
        output = masking.zero_rows(self.output_dense(context), rows)
        set_output_mask(output, step.query_mask)
        result = (output,) if cache is None else (output, cache)
        if return_attention_scores:
            result += (scores,)
        return result[0] if len(result) == 1 else result

    def _queries(self, step):
        """Step 2a: the projected queries `(B, Tq, H, K)` (padding selected
        out, positioned) and the gate's values (`None` without a gate)."""
        query = masking.select(step.query, step.query_mask)
        query = self._add_positions(query, "query", step.start)
        gate_dense = getattr(self, "_gate_dense", None)
        gate = None if gate_dense is None else gate_dense(query)
        return self._rotate(self.query_dense(query), step.start), gate

    def _keys_and_values(self, step, cache, index):
        """Step 2b: `(k, v, cache, length, offset, step)`: projected keys
        and values `(B, Tv, H_kv, K)` with padding selected out by the
        value (or key) mask alone, from the inputs or through the cache;
        the new cache (`None` without one); the number of keys; the first
        query step's index in a self-attention cache (else `None`); the
        step with its masks over the cache's keys."""
        value, key = step.value, step.key
        if step.self_attention:
            value = key = masking.select(value, inputs.new_steps_mask(step))
        elif cache is None:
            key_mask = step.value_mask if key is value else step.key_mask
            key = masking.select(key, key_mask)
            value = masking.select(value, step.value_mask)
        if cache is None:
            k, v = self._project_keys(value, key)
            return k, v, None, ops.shape(key)[1], None, step
        inputs.check_cacheable(self)
        if self.cache_policy is not None and index is not None:
            k_new, v_new = self._project_keys(value, key, step.start)
            k, v, at, cache = self.cache_policy.write(
                cache, k_new, v_new, index, step.query_mask, k_new.dtype
            )
            step = step._replace(key_positions=at)  # (B, T); -1: none
            return k, v, cache, ops.shape(k)[1], index, step
        cache = ops.cast(cache, self.compute_dtype)
        length = ops.shape(cache)[2]
        step = step._replace(key_mask=None)
        if index is None:  # cross-attention over a precomputed memory
            return cache[:, 0], cache[:, 1], cache, length, None, step
        k_new, v_new = self._project_keys(value, key, step.start)
        k, v, cache = cache_policies.FULL.write(cache, k_new, v_new, index)
        if step.self_attention and step.value_mask is None:
            if step.query_mask is not None:  # keys written so far: valid
                step = step._replace(
                    value_mask=masking.written_mask(
                        step.query_mask, length, index
                    )
                )
        return k, v, cache, length, index, step

    # -- Positions. ------------------------------------------------------

    def _add_positions(self, x, stream, start_index=0):
        """`x + p(start_index + i)` along the attention axis."""
        table = self._stream_positions.get(stream)
        if table is None:
            return x
        return table.add_to(x, self._position_axis, start_index)

    def _rotate(self, x, start):
        """`x` `(B, T, H, K)` rotated at positions `start..start+T-1`."""
        return x if self.rotary is None else self.rotary(x, start_index=start)

    def score_bias(self, query_positions, key_positions):
        """A bias for the scores, broadcastable to `(B, H, Tq, Tk)`, or
        `None`: ALiBi's for `position="alibi"`. Override it for other
        relative positions (e.g. a learned T5 bucket table built in
        `build`); `query_positions` `(Tq,)` and `key_positions` `(Tk,)`
        are the steps' absolute positions (they continue in a cache)."""
        kind = arguments.POSITION_LAYERS.get(self.position)
        if getattr(kind, "attention_role", None) != "scores":
            return None
        return kind.bias(self.num_heads, query_positions, key_positions)

    # -- Keys and values, and the cache. -----------------------------------

    def _project_keys(self, value, key, start=0):
        """Projected keys and values `(B, T, H_kv, K)` of inputs at
        positions `start..start+T-1`."""
        k = self.key_dense(self._add_positions(key, "key", start))
        v = self.value_dense(self._add_positions(value, "value", start))
        return self._rotate(k, start), v

    def compute_cache(self, value, key=None):
        """Projected keys and values of `value` `(B, Tv, D)` (positions
        `0..Tv-1`), `(B, 2, Tv, H_kv, key_dim)`: a cross-attention memory,
        computed once and passed as `cache` (no index) at each step."""
        inputs.check_cacheable(self)
        key = value if key is None else key
        dtype = self.compute_dtype
        k, v = self._project_keys(ops.cast(value, dtype), ops.cast(key, dtype))
        return ops.stack([k, v], axis=1)

    def empty_cache(self, batch_size, length):
        """An all-zero cache `(B, 2, length, H_kv, key_dim)` (or the
        cache policy's empty state) for `length` positions; `batch_size`
        an int, or a tensor whose first axis is the batch (an exported
        cache is then sized by its input)."""
        inputs.check_cacheable(self)
        policy = self.cache_policy or cache_policies.FULL
        heads, dim = self.num_key_value_heads, self.key_dim
        return policy.empty(batch_size, length, heads, dim, self.compute_dtype)

    def decode_rows(self, query, key_cache, value_cache, positions):
        """One step a row, each row at a position of its own, over a
        full cache the call only reads (a server's many streams in one
        call; the caller writes the new keys and values in place).

        Args:
            query: `(R, 1, D)`, one step a row, self-attention.
            key_cache: `(R, H_kv, S, key_dim)` (LiteRT-LM's cache
                layout, a row a stream): row `r`'s keys at positions
                `0..positions[r]-1` (what later slots hold is ignored).
            value_cache: the values, as `key_cache`.
            positions: `(R,)` int: each row's step position.

        Returns:
            `(output (R, 1, output_dim), key, value)`, the step's key and
            value `(R, 1, H_kv, key_dim)` to write at `positions`. The
            output equals the call with a full `cache` holding the same
            keys and `cache_update_index=positions`.
        """
        inputs.check_cacheable(self)
        return row_decoding.decode_rows(
            self, query, key_cache, value_cache, positions
        )

    # -- Attention. --------------------------------------------------------

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
        """Keras's hook: attention, then `g` on the heads' outputs
        (`keras_attn.layers._attention_kernel.attend`). `key` and `value`
        have `num_heads` heads (grouped ones repeated); a bias is added
        to the scores."""
        return kernel.attend(
            self,
            query,
            key,
            value,
            attention_mask,
            training,
            return_attention_scores,
            use_causal_mask,
            attention_bias,
        )

    def _masked_softmax(self, attention_scores, attention_mask=None):
        """Keras's masked softmax, except that masked keys get exactly zero
        weight and a query with no key gets zeros (not uniform weights)."""
        if attention_mask is None:
            return super()._masked_softmax(attention_scores)
        return masking.masked_softmax_over(
            attention_scores, attention_mask, len(self.attention_axes)
        )

    # -- Shapes, sublayers, config. ----------------------------------------

    def compute_output_shape(
        self, query_shape, value_shape=None, key_shape=None, **kw
    ):
        shapes = query_shape, value_shape, key_shape
        return inputs.output_shape(*shapes, self._output_tail)

    def compute_output_spec(
        self, query, value=None, key=None, return_attention_scores=False, **kw
    ):
        spec = inputs.output_spec
        return spec(self, query, value, key, return_attention_scores, kw)

    def _denses(self):
        names = ("_query_dense", "_key_dense", "_gate_dense", "_value_dense")
        names += ("_output_dense", "_ff_1", "_ff_2")
        return [d for d in (getattr(self, n, None) for n in names) if d]

    def enable_lora(self, rank, targets=("query", "value")):
        """LoRA (Hu et al. 2021) on the projections named in `targets`
        (`"query"`, `"key"`, `"value"`, `"attention_output"`, `"gate"`,
        `"feed_forward_1"`, `"feed_forward_2"`); the other weights freeze.
        KerasHub's default targets are query and value."""
        _sublayers.enable_lora(self.name, self._denses(), rank, targets)

    def load_own_variables(self, store):
        legacy_layers.load_own_variables(
            self, store, self._denses(), super().load_own_variables
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            arguments.own_config(self),
            dtype=_sublayers.dtype_config(
                self, self._denses() if self.built else []
            ),
            output_shape=None if self.output_dim else self._output_tail,
            attention_axes=self._given_axes,
            flash_attention=self._flash_attention,
        )
        return config

    @classmethod
    def from_config(cls, config):
        # keras_attn 0.2 wrote `value_dim=None` and no `activity_regularizer`;
        # both load as they are. Keras's own keys pass through.
        return cls(**config)


MultiHeadPositional.__doc__ = MultiHeadPositional.__doc__.replace(
    "{arguments}", arguments.args_doc()
)
