"""Key/value cache policies for `MultiHeadPositional`: what a decoding
layer keeps of the keys and values it has seen.

`MultiHeadPositional(cache_policy=...)` takes one; `layer.empty_cache`
makes its state and each call with `cache_update_index` writes the new
steps into it. Without a policy the cache is the full `(B, 2, T, H_kv,
K)` tensor of every position. The policies:

- `SlidingWindowCache(window)`: a ring buffer of the last `window`
  positions, so memory stays `O(window)` however long the sequence. It
  equals the full pass with Keras's `sliding_window=window` and a causal
  mask: query `i` attends to keys `i - window < j <= i`.
- `SinkCache(sinks, window)`: the first `sinks` positions kept for good
  (attention sinks; Xiao et al. 2024) and a ring of the last `window`:
  query `i` attends to keys `j < sinks` or `i - window < j <= i`.
- `Int8Cache(window=None, sinks=0)`: keys and values stored as int8 with
  one float32 scale per position and head (`max |x| / 127`), read back as
  `q * scale`; the whole sequence, or a window and sinks as above.

A policy's state is a tuple, every element batch-first (so beam search
reorders it as any state): the keys and values `(B, 2, N, H_kv, K)`, for
int8 their scales `(B, 2, N, H_kv)`, and the absolute position each slot
holds `(B, N)` (`-1`: empty, or a padded step), `N` the slots. Decoding
through a policy is causal (a step attends to the written positions
before it and itself); padded steps (the query mask) are never attended
to. `keras.ops` only: every backend, compiled or eager.
"""

import keras
from keras import ops

from keras_attn.ops import positional
from keras_attn.validation import positive_int


def batch_full(batch_size, tail, value, dtype):
    """`(B, *tail)` filled with `value`. `batch_size`: an int, or a tensor
    whose first axis is the batch (e.g. the source ids): the result is
    then that tensor's zeros broadcast against a constant, so an exported
    graph sizes it from its input's shape (a `FILL` sized by a value
    makes LiteRT's `CompiledModel` refuse the output)."""
    if isinstance(batch_size, int):
        return ops.full((batch_size, *tail), value, dtype)
    anchor = batch_size
    while len(anchor.shape) > 1:
        anchor = anchor[:, 0]
    anchor = ops.zeros_like(ops.cast(anchor, dtype))  # (B,)
    for _ in tail:
        anchor = ops.expand_dims(anchor, -1)
    return anchor + ops.full((1, *tail), value, dtype)


def _scatter_steps(old, new, weights):
    """`old` `(B, N, ...)` with slot `n` replaced by `Σ_t w[t, n] new[t]`
    where a step writes it (`weights` `(Tq, N)`, one-hot rows, at most one
    writer a slot)."""
    work = keras.backend.standardize_dtype(old.dtype)
    work = work if "float" in work else "float32"
    weights = ops.cast(weights, work)
    written = ops.sum(weights, axis=0)  # (N,)
    shape = (1, -1) + (1,) * (len(old.shape) - 2)
    keep = ops.reshape(1.0 - written, shape)
    spread = ops.einsum("tn,bt...->bn...", weights, ops.cast(new, work))
    return ops.cast(ops.cast(old, work) * keep + spread, old.dtype)


class _Policy:
    """A cache of `sinks + window` slots (`window=None`: one slot a
    position, as many as `empty_cache`'s length), float or int8."""

    quantize = None

    def __init__(self, window=None, sinks=0):
        positive_int("window", window, allow_none=True)
        if isinstance(sinks, bool) or not isinstance(sinks, int) or sinks < 0:
            raise ValueError(
                f"Expected sinks to be an int >= 0. Received: sinks={sinks!r}"
            )
        if sinks and window is None:
            raise ValueError(
                "Attention sinks keep the first positions beside a window: "
                f"give a window. Received: sinks={sinks}, window=None"
            )
        self.window, self.sinks = window, sinks

    def get_config(self):
        return {"window": self.window, "sinks": self.sinks}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        return (
            f"{type(self).__name__}(window={self.window}, sinks={self.sinks})"
        )

    def slots(self, length):
        """The slots `N` of a cache for sequences of `length` positions."""
        if self.window is None:
            positive_int("length", length)
            return length
        return self.sinks + self.window

    def empty(self, batch_size, length, heads, key_dim, dtype):
        """The empty state (every position `-1`); `batch_size` as in
        `batch_full`."""
        n = self.slots(length)
        tail = (2, n, heads, key_dim)
        state = (batch_full(batch_size, tail, 0, self.quantize or dtype),)
        if self.quantize:
            state += (batch_full(batch_size, tail[:-1], 0, "float32"),)
        return (*state, batch_full(batch_size, (n,), -1, "int32"))

    def memory_bytes(self, batch_size, length, heads, key_dim, dtype):
        """Bytes of the state for sequences of `length` positions."""
        n = self.slots(length)
        item = keras.backend.standardize_dtype(self.quantize or dtype)
        size = {"int8": 1, "float16": 2, "bfloat16": 2, "float64": 8}
        values = batch_size * 2 * n * heads * key_dim * size.get(item, 4)
        scales = batch_size * 2 * n * heads * 4 if self.quantize else 0
        return values + scales + batch_size * n * 4

    def _store(self, k, v):
        """`(values, scales or None)` to write for keys and values
        `(B, T, H, K)`."""
        both = ops.stack([k, v], axis=1)  # (B, 2, T, H, K)
        if not self.quantize:
            return both, None
        both = ops.cast(both, "float32")
        scale = ops.max(ops.abs(both), axis=-1) / 127.0  # (B, 2, T, H)
        safe = ops.where(scale > 0, scale, ops.ones_like(scale))
        q = ops.clip(ops.round(both / safe[..., None]), -127, 127)
        return ops.cast(q, "int8"), scale

    def _read(self, values, scales, dtype):
        """Keys and values `(B, T, H, K)` each, in `dtype`."""
        values = ops.cast(values, "float32" if self.quantize else dtype)
        if self.quantize:
            values = ops.cast(values * scales[..., None], dtype)
        return values[:, 0], values[:, 1]

    def _slot_weights(self, positions, steps, n):
        """`(Tq, N)` one-hot: the slot each new step writes, zero for a
        step a later one in the same call overwrites."""
        ring = self.window
        sink = positions < self.sinks
        slot = ops.where(
            sink, positions, self.sinks + (positions - self.sinks) % ring
        )
        last = ops.logical_or(sink, positions + ring > positions[-1])
        hot = ops.one_hot(slot, n)  # (Tq, N)
        return hot * ops.cast(last, hot.dtype)[:, None]

    def write(self, state, k_new, v_new, index, new_valid, dtype):
        """`(k, v, key_positions, new_state)`: the keys and values to
        attend to `(B, T, H, K)`, their positions `(B, T)` (`-1`: none),
        and the state with the new steps (at positions `index...`,
        `new_valid` `(B, Tq)` or `None`) written."""
        values, *scales, positions = state
        scales = scales[0] if scales else None
        steps = ops.shape(k_new)[1]
        new_pos = ops.arange(steps, dtype="int32") + ops.cast(index, "int32")
        mine = ops.broadcast_to(new_pos[None], ops.shape(k_new)[:2])
        if new_valid is not None:
            mine = ops.where(ops.cast(new_valid, "bool"), mine, -1)
        new_values, new_scales = self._store(k_new, v_new)
        if self.window is None:  # one slot a position: written in place
            at = (0, 0, index, 0, 0)
            values = ops.slice_update(values, at, new_values)
            if self.quantize:
                scales = ops.slice_update(scales, at[:-1], new_scales)
            positions = ops.slice_update(positions, (0, index), mine)
            k, v = self._read(values, scales, dtype)
            state = (
                (values, scales, positions)
                if self.quantize
                else (values, positions)
            )
            return k, v, positions, state
        # A ring: attend to what it held and the new steps, then write.
        k_old, v_old = self._read(values, scales, dtype)
        k_in, v_in = self._read(new_values, new_scales, dtype)
        k = ops.concatenate([k_old, k_in], axis=1)
        v = ops.concatenate([v_old, v_in], axis=1)
        seen = ops.concatenate([positions, mine], axis=1)
        weights = self._slot_weights(new_pos, steps, ops.shape(positions)[1])
        moved = ops.moveaxis(new_values, 2, 1)  # (B, Tq, 2, H, K)
        values = _scatter_steps(ops.moveaxis(values, 2, 1), moved, weights)
        state = (ops.moveaxis(values, 1, 2),)
        if self.quantize:
            moved = ops.moveaxis(new_scales, 2, 1)
            scales = _scatter_steps(ops.moveaxis(scales, 2, 1), moved, weights)
            state += (ops.moveaxis(scales, 1, 2),)
        written = _scatter_steps(positions + 1, mine + 1, weights) - 1
        return k, v, seen, (*state, written)

    def allowed(self, query_positions, key_positions):
        """`(B, Tq, T)`: query `i` (positions `(Tq,)`) may attend to key
        `j` (positions `(B, T)`): `0 <= j <= i`, within the window or a
        sink."""
        i = ops.cast(query_positions, "int32")[None, :, None]
        j = key_positions[:, None, :]
        mask = ops.logical_and(j >= 0, j <= i)
        if self.window is not None:
            near = ops.logical_or(i - j < self.window, j < self.sinks)
            mask = ops.logical_and(mask, near)
        return mask


@keras.saving.register_keras_serializable(package="keras_attn")
class SlidingWindowCache(_Policy):
    """A ring buffer of the last `window` positions (memory `O(window)`);
    equal to the full pass with `sliding_window=window`, causal."""

    def __init__(self, window, sinks=0):
        positive_int("window", window)
        super().__init__(window, sinks)


@keras.saving.register_keras_serializable(package="keras_attn")
class SinkCache(_Policy):
    """The first `sinks` positions and a ring of the last `window`."""

    def __init__(self, sinks, window):
        positive_int("sinks", sinks)
        positive_int("window", window)
        super().__init__(window, sinks)

    def get_config(self):
        return {"sinks": self.sinks, "window": self.window}


@keras.saving.register_keras_serializable(package="keras_attn")
class Int8Cache(_Policy):
    """Keys and values in int8 with a float32 scale a position and head;
    every position (`window=None`), or a window and sinks."""

    quantize = "int8"


class FullCache:
    """`MultiHeadPositional`'s cache without a policy: every position, in
    one float tensor `(B, 2, T, H_kv, K)` (KerasHub's layout), written in
    place; its masks are the layer's own (`value_mask` over the `T`
    keys)."""

    def empty(self, batch_size, length, heads, key_dim, dtype):
        return batch_full(batch_size, (2, length, heads, key_dim), 0, dtype)

    def write(self, cache, k_new, v_new, index):
        """`(k, v, new cache)` with the new steps written at `index` (or,
        for an index a row `(B,)`, each row's at its own)."""
        if positional.per_row(index):
            return self._write_rows(cache, k_new, v_new, index)
        at = (0, index, 0, 0)
        k = ops.slice_update(cache[:, 0], at, k_new)  # (B, T, H, K)
        v = ops.slice_update(cache[:, 1], at, v_new)
        return k, v, ops.stack([k, v], axis=1)

    def _write_rows(self, cache, k_new, v_new, index):
        length = ops.shape(cache)[2]
        at = positional.step_positions(ops.shape(k_new)[1], index)  # (B, t)
        hot = ops.one_hot(at, length, dtype=cache.dtype)  # (B, t, T)
        written = ops.sum(hot, axis=1)[:, :, None, None] > 0  # (B, T, 1, 1)

        def put(old, new):
            spread = ops.einsum("bts,bthk->bshk", hot, ops.cast(new, old.dtype))
            return ops.where(written, spread, old)

        k, v = put(cache[:, 0], k_new), put(cache[:, 1], v_new)
        return k, v, ops.stack([k, v], axis=1)


FULL = FullCache()


def get(policy):
    """A policy from itself, `None`, or its config (`keras.saving`)."""
    if policy is None or isinstance(policy, _Policy):
        return policy
    if isinstance(policy, dict):
        return keras.saving.deserialize_keras_object(policy)
    raise ValueError(
        "Expected cache_policy to be None, a SlidingWindowCache, SinkCache "
        f"or Int8Cache, or its config. Received: cache_policy={policy!r}"
    )


def serialize(policy):
    return (
        None if policy is None else keras.saving.serialize_keras_object(policy)
    )
