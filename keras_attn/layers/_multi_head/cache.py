"""`MultiHeadPositional`'s key/value cache, in KerasHub's
`CachedMultiHeadAttention` layout `(B, 2, T, H_kv, key_dim)`: a memory
projected once for cross-attention, or a self-attention cache written at
`cache_update_index`."""

from keras import ops


class KeyValueCacheMixin:
    """For a `MultiHeadAttention` subclass with `_add_positions`,
    `_rotate` and `num_key_value_heads`."""

    def _check_cacheable(self):
        if self.value_dim != self.key_dim:
            raise ValueError(
                "A key/value cache needs value heads as wide as key heads. "
                f"Received: key_dim={self.key_dim}, value_dim={self.value_dim}"
            )

    def _project_keys(self, value, key, start=0):
        """Projected keys and values `(B, T, H_kv, K)` of inputs at
        positions `start..start+T-1`."""
        k = self._key_dense(self._add_positions(key, "key", start))
        v = self._value_dense(self._add_positions(value, "value", start))
        return self._rotate(k, start), v

    def compute_cache(self, value, key=None):
        """Projected keys and values of `value` `(B, Tv, D)` (positions
        `0..Tv-1`), `(B, 2, Tv, H_kv, key_dim)`: a cross-attention memory,
        computed once and passed as `cache` (no index) at each step."""
        self._check_cacheable()
        key = value if key is None else key
        dtype = self.compute_dtype
        k, v = self._project_keys(ops.cast(value, dtype), ops.cast(key, dtype))
        return ops.stack([k, v], axis=1)

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
        k_new, v_new = self._project_keys(value, key, start)
        at = (0, index, 0, 0)
        k = ops.slice_update(cache[:, 0], at, k_new)  # (B, T, H, K)
        v = ops.slice_update(cache[:, 1], at, v_new)
        return k, v, ops.stack([k, v], axis=1), length, index
