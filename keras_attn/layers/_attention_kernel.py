"""Step 4 of `MultiHeadPositional`'s call: the attention kernel, the
backend's fused op or Keras's einsums, then `g` on the heads."""

import math

import keras
from keras import ops

from keras_attn.layers import _sublayers
from keras_attn.ops import heads, masking


def attend(
    layer,
    query,
    key,
    value,
    attention_mask=None,
    training=None,
    return_attention_scores=False,
    use_causal_mask=False,
    attention_bias=None,
):
    """Attention, then `g` on the heads' outputs. `key` and `value`
    have `num_heads` heads (grouped ones repeated), as in Keras's
    `GroupedQueryAttention`; a bias is added to the scores. The
    backend's fused op runs where Keras's `MultiHeadAttention` would
    use it (with its own causal kernel when causal and no bias), else
    Keras's einsums and masked softmax. Both scale the query before its
    product with the keys, as Keras's einsum path does: Keras's fused
    call scales the product, which overflows float16 where the einsums
    do not."""
    if layer._flash_attention and return_attention_scores:
        raise ValueError(
            "Returning attention scores needs flash attention off. "
            "Received: flash_attention=True, return_attention_scores=True"
        )
    # JAX's fused op needs value heads as wide as key heads (Keras 3.15
    # MultiHeadAttention fails there): take the explicit path.
    explicit = return_attention_scores or (
        layer.value_dim != layer.key_dim
        and keras.backend.backend() == "jax"
        and not layer._flash_attention
    )
    scale = 1.0 / math.sqrt(float(layer.key_dim))
    query = ops.multiply(query, ops.cast(scale, query.dtype))
    fused = not (explicit or layer.dropout > 0.0 or len(query.shape) != 4)
    mask, bias, causal = attention_mask, attention_bias, use_causal_mask
    if causal and not (fused and bias is None):
        shape = ops.shape(query)[1], ops.shape(value)[1]
        causal_mask = masking.causal_mask(*shape)[None]  # (1, Tq, Tv)
        mask = (
            causal_mask
            if mask is None
            else ops.logical_and(ops.cast(mask, "bool"), causal_mask)
        )
        causal = False
    mask = None if mask is None else ops.cast(mask, "bool")
    scores = None
    if fused:
        context = heads.fused_attention(
            query, key, value, mask, bias, causal, layer._flash_attention
        )
    else:
        scores = ops.einsum(layer._dot_product_equation, key, query)
        if bias is not None:
            scores = scores + ops.cast(bias, scores.dtype)
        scores = layer._masked_softmax(scores, mask)
        dropped = layer._dropout_layer(scores, training=training)
        context = ops.einsum(layer._combine_equation, dropped, value)
    context = masking.zero_empty_heads(context, attention_mask)
    context = _sublayers.apply_g(
        layer.feed_forward, layer._ff_1, layer._ff_2, context
    )
    return context, scores if return_attention_scores else None
