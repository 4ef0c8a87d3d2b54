"""`MultiHeadPositional`'s masks: every mask merged as Keras merges them
(shifted inside a cache), the queries left with a key, and a masked
softmax that gives masked keys exactly zero weight."""

from keras import ops

from keras_attn.ops import masking


class MasksMixin:
    """For a `MultiHeadAttention` subclass."""

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

    def _zero_empty_heads(self, context, mask):
        """`context` `(B, Tq, H, Dv)` with zeros where a per-head mask
        `(B|1, H, Tq, Tv)` leaves a head's query no key: the fused op
        would give it the values' average there."""
        if mask is None or len(mask.shape) != 4 or len(context.shape) != 4:
            return context
        alive = ops.any(ops.cast(mask, "bool"), axis=-1)  # (B|1, H, Tq)
        alive = ops.transpose(alive, (0, 2, 1))[..., None]
        return ops.where(alive, context, ops.zeros_like(context))

    def _masks(self, query, value, length, offset, masks, causal, lean):
        """`(mask, rows)`: the merged mask for `_compute_attention` and the
        queries with a key (`None` where every query has one or it cannot
        tell). `masks`: the query, value, key and attention masks. `lean`
        (causality and padding only): no `(Tq, Tv)` mask is built, the
        fused op gets `is_causal` and the keys' padding as `(B, 1, 1, Tv)`
        (the memory of long sequences on GPUs)."""
        if lean:
            return masking.lean_masks(masks[0], masks[1])
        full = self._full_mask(query, value, length, offset, *masks, causal)
        return full, self._rows_with_a_key(full, len(query.shape) - 1)

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
                steps,
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
