"""Step 3 of `MultiHeadPositional`'s call: which keys each query may
see, every mask merged into the one its attention kernel reads."""

from keras import ops

from keras_attn.layers import _multi_head_inputs as inputs
from keras_attn.ops import masking
from keras_attn.validation import check_attention_masks


def merged_mask(layer, step, k, length, offset, use_causal_mask, own_kernel):
    """Step 3: `(mask, rows, lean)`: every mask merged for
    `_compute_attention`, the queries with a key (`None` where every
    query has one or it cannot tell), and whether the lean causal
    route runs: causality and padding only, no `(Tq, Tv)` mask built,
    the fused op's `is_causal` with the keys' padding `(B, 1, 1, Tv)`
    (the memory of long sequences on GPUs).

    `own_kernel`: whether `layer`'s class keeps `MultiHeadPositional`'s
    `_compute_attention`. As in Keras, a subclass that overrides it gets
    the causal mask itself, in the five-argument call."""
    query, masks = step.query, (step.query_mask, step.value_mask)
    attention_mask = step.attention_mask
    if step.key_positions is not None:  # through a cache policy
        steps = ops.arange(ops.shape(query)[1]) + offset
        allowed = layer.cache_policy.allowed(steps, step.key_positions)
        mask = masking.full_mask(
            ops.shape(query)[1],
            length,
            step.query_mask,
            None,
            None,
            allowed,
        )
        return mask, masking.rows_with_a_key(mask, 2, (1,)), False
    if step.three_d and step.cached:  # checked against the cache
        check_attention_masks(query, k, *masks, attention_mask, layer.num_heads)
    if step.three_d and attention_mask is not None:
        if len(attention_mask.shape) == 2:  # (Tq, Tv) → (1, Tq, Tv)
            attention_mask = attention_mask[None]
    lean = bool(
        use_causal_mask
        and offset is None
        and attention_mask is None
        and not layer._window
        and own_kernel
        and inputs.one_length(step)
    )
    if lean:
        mask, rows = masking.lean_masks(step.query_mask, step.value_mask)
        return mask, rows, True
    if offset is None and not step.three_d:
        mask = layer._compute_attention_mask(
            query,
            step.value,
            query_mask=step.query_mask,
            value_mask=step.value_mask,
            key_mask=step.key_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
        )
    else:
        masks = (*masks, step.key_mask, attention_mask, use_causal_mask)
        steps = ops.shape(query)[1]
        mask = masking.full_mask(steps, length, *masks, layer._window, offset)
    rank = len(query.shape) - 1
    rows = masking.rows_with_a_key(mask, rank, layer.attention_axes)
    return mask, rows, False
