"""Which kernel `MultiHeadPositional` runs: Keras's `_compute_attention`
(the backend's fused `dot_product_attention` where Keras uses it, else its
einsums), or, with a score bias, the fused op with `bias=` or the einsums
with the bias added; `g` after."""

import keras
from keras import ops

from keras_attn.ops import masking


class AttentionMixin:
    """For a `MultiHeadAttention` subclass with `num_key_value_heads`,
    `_g` and `_zero_empty_heads`."""

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
        """Keras's attention (a score bias through `_biased_attention`),
        then `g` on the heads' outputs. `key` and `value` have `num_heads`
        heads (grouped ones repeated by `_repeat_heads`), as in Keras's
        `GroupedQueryAttention`."""
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
            context = self._zero_empty_heads(context, attention_mask)
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
        context = self._zero_empty_heads(context, attention_mask)
        return self._g(context), scores if return_attention_scores else None

    def _repeat_heads(self, x):
        """`(B, T, H_kv, K)` → `(B, T, H, K)`: each key/value head serves
        `num_heads / num_key_value_heads` query heads in a row."""
        groups = self.num_heads // self.num_key_value_heads
        return x if groups == 1 else ops.repeat(x, groups, axis=-2)

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
