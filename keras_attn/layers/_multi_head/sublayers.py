"""`MultiHeadPositional`'s sublayers beyond Keras's: grouped key/value
heads, the post-attention feed-forward `g`, the 0.1 weight names, LoRA."""

from keras import layers, ops

from keras_attn.layers import _sublayers


class SublayersMixin:
    """For a `MultiHeadAttention` subclass with `num_key_value_heads`,
    `feed_forward`, `feed_forward_dim` and `feed_forward_activation`."""

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

    def _build_attention(self, rank):
        # Called by `MultiHeadAttention.build` between the value and output
        # projections: with grouped heads, the key and value projections
        # it made are replaced by ones with `num_key_value_heads` heads,
        # in Keras's weight order (query, key, gate, value, output).
        if self.num_key_value_heads != self.num_heads:
            gate = getattr(self, "_gate_dense", None)
            for old in (self._key_dense, gate, self._value_dense):
                if old is not None:
                    self._tracker.untrack(old)
            for name, width in (("key", self._key_dim), ("value", None)):
                old = getattr(self, f"_{name}_dense")
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
                if name == "key" and gate is not None:
                    self._gate_dense = gate  # tracked again, after the key
        super()._build_attention(rank)

    def _build_feed_forward(self):
        """`g`'s two `Dense` layers (`None` without a feed-forward)."""
        if self.feed_forward is None:
            return
        width = self.value_dim
        if self.feed_forward == "concat":
            width *= self.num_heads
        hidden = self.feed_forward_dim or 2 * width
        for attr, units, fan_in, activation in (
            ("_ff_1", hidden, width, self.feed_forward_activation),
            ("_ff_2", width, hidden, None),
        ):
            common = self._get_common_kwargs_for_sublayer()
            del common["activity_regularizer"]
            dense = layers.Dense(
                units,
                activation=activation,
                name=f"feed_forward_{attr[-1]}",
                **common,
            )
            dense.build((None, fan_in))
            setattr(self, attr, dense)

    def _g(self, context):
        """`g` on the heads' outputs `(..., H, Dv)`: per head, or on their
        concatenation."""
        if self.feed_forward is None:
            return context
        if self.feed_forward == "per_head":
            return self._ff_2(self._ff_1(context))
        heads = ops.shape(context)
        flat = ops.reshape(context, (*heads[:-2], -1))  # (..., H*Dv)
        return ops.reshape(self._ff_2(self._ff_1(flat)), heads)

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
