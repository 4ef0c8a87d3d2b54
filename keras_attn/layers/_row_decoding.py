"""`MultiHeadPositional.decode_rows`: one step a row, each row at a
position of its own, over a key/value cache the call only reads.

A server decoding many streams in one call keeps each stream's keys and
values in a row of its own and writes each step's new key and value in
place; the call itself reads the cache once for the scores and once for
the context, and never copies it. A row at position `p` attends to its
cache's positions `0..p-1` (whatever the slots from `p` on hold is
ignored; with Keras's `sliding_window=w`, only `p-w+1..p-1`) and to
its own new key, which is scored apart and joined to the cache's scores
before the softmax (a score bias, ALiBi's, is added by distance):

    s_j = q_p · k_j / sqrt(d)   (j < p),    s_p = q_p · k_new / sqrt(d)
    a = softmax([s_0 … s_{p-1}, s_p]),      h = Σ_{j<p} a_j v_j + a_p v_new

The cache is `(rows, H_kv, S, key_dim)` for keys and for values, the
layout of LiteRT-LM's caches with a row a stream: each row and key head
is one matrix, which the products read as it lies (the keys transposed
by the product itself), and grouped heads read their shared key head in
place (query head `h` reads key head `h // (H / H_kv)`, Keras's
`GroupedQueryAttention` order), so no copy of the cache is made.
"""

import math

from keras import ops

from keras_attn.layers import _sublayers
from keras_attn.ops import masking


def check_rows(layer, query, key_cache, value_cache, positions):
    """A `ValueError` naming what `decode_rows` cannot take."""
    if layer.cache_policy is not None:
        raise ValueError(
            "decode_rows reads a full cache; layer "
            f"{layer.name!r} has cache_policy={layer.cache_policy!r}."
        )
    if len(query.shape) != 3 or query.shape[1] != 1:
        raise ValueError(
            "Expected query of shape (rows, 1, features): one step a row. "
            f"Received: query.shape={tuple(query.shape)}"
        )
    heads, dim = layer.num_key_value_heads, layer.key_dim
    for name, cache in (("key_cache", key_cache), ("value_cache", value_cache)):
        shape = tuple(cache.shape)
        if len(shape) != 4 or shape[1] != heads or shape[3] != dim:
            raise ValueError(
                f"Expected {name} of shape (rows, {heads}, length, {dim}). "
                f"Received: {name}.shape={shape}"
            )
    if len(positions.shape) != 1:
        raise ValueError(
            "Expected positions of shape (rows,): a position a row. "
            f"Received: positions.shape={tuple(positions.shape)}"
        )


def decode_rows(layer, query, key_cache, value_cache, positions):
    """`(output (R, 1, D), key (R, 1, H_kv, K), value (R, 1, H_kv, K))`
    of `layer` on one step a row (see the module's docstring)."""
    dtype = layer.compute_dtype
    query = ops.cast(query, dtype)
    key_cache = ops.cast(key_cache, dtype)
    value_cache = ops.cast(value_cache, dtype)
    positions = ops.cast(positions, "int32")
    check_rows(layer, query, key_cache, value_cache, positions)
    queried = layer._add_positions(query, "query", positions)
    gate_dense = getattr(layer, "_gate_dense", None)
    gate = None if gate_dense is None else gate_dense(queried)
    q = layer._rotate(layer.query_dense(queried), positions)  # (R, 1, H, K)
    k_new, v_new = layer._project_keys(query, query, positions)
    rows, kv_heads = ops.shape(q)[0], layer.num_key_value_heads
    group = layer.num_heads // kv_heads
    q = ops.reshape(q, (rows, kv_heads, group, layer.key_dim))
    q = ops.multiply(q, ops.cast(1.0 / math.sqrt(layer.key_dim), q.dtype))
    k_own = ops.reshape(k_new, (rows, kv_heads, 1, layer.key_dim))
    v_own = ops.reshape(v_new, (rows, kv_heads, 1, layer.value_dim))
    old = ops.einsum("rhgk,rhsk->rhgs", q, key_cache)  # (R, Hkv, G, S)
    new = ops.sum(q * k_own, axis=-1, keepdims=True)  # (R, Hkv, G, 1)
    length = ops.shape(key_cache)[2]
    slots = ops.arange(length, dtype="int32")[None]
    written = slots < positions[:, None]
    window = getattr(layer, "_window", None)
    if window is not None:  # Keras's sliding_window: p - w < j <= p
        written = ops.logical_and(written, slots > positions[:, None] - window)
    valid = ops.concatenate([written, ops.ones_like(written[:, :1])], axis=1)
    scores = ops.concatenate([old, new], axis=-1)  # (R, Hkv, G, S + 1)
    bias = _bias(layer, positions, length, kv_heads, group)
    if bias is not None:
        scores = scores + ops.cast(bias, scores.dtype)
    weights = masking.masked_softmax(scores, valid[:, None, None, :])
    context = ops.einsum(
        "rhgs,rhsk->rhgk", weights[..., :length], value_cache
    ) + ops.multiply(weights[..., length:], v_own)
    context = ops.reshape(context, (rows, 1, layer.num_heads, layer.value_dim))
    context = _sublayers.apply_g(
        layer.feed_forward, layer._ff_1, layer._ff_2, context
    )
    if gate is not None:
        context = ops.multiply(context, gate)
    return layer.output_dense(context), k_new, v_new


def _bias(layer, positions, length, kv_heads, group):
    """The layer's score bias (ALiBi's) `(R, H_kv, G, S + 1)` for rows
    at `positions` over the cache's slots `0..S-1` and their own new key,
    or `None`; a bias is a function of the distance (a relative one), so
    the new key's is the bias at distance 0."""
    old = layer.score_bias(positions[:, None], ops.arange(length))
    if old is None:
        return None
    zero = ops.zeros((1,), "int32")
    own = layer.score_bias(zero, zero)  # (1, H, 1, 1)
    old = ops.cast(old, "float32")
    own = ops.broadcast_to(
        ops.cast(own, "float32"), (ops.shape(old)[0], layer.num_heads, 1, 1)
    )
    both = ops.concatenate([old, own], axis=-1)  # (R, H, 1, S + 1)
    return ops.reshape(both, (-1, kv_heads, group, length + 1))
