"""Greedy and beam-search decoding for encoder-decoder models, in-graph.

Both run inside `tf.function` (so they live in an exported SavedModel). The
model is given as two callables:

- `encode(source_ids) -> (memory, state)`;
- `step(prev_ids (B, 1), state, memory, source_mask) -> (logits (B, V),
  new_state, attention (B, S))`.

Token ids: `start_id` begins every output, `end_id` ends it, 0 pads.
`banned_ids` (e.g. the `[UNK]` id) are never emitted.
"""

import tensorflow as tf


def ban(logits, banned_ids):
    """`logits (..., V)` as float32, `banned_ids` columns set to -1e9."""
    logits = tf.cast(logits, "float32")
    if not banned_ids:
        return logits
    vocab = tf.shape(logits)[-1]
    hit = tf.reduce_max(tf.one_hot(list(banned_ids), vocab), axis=0) > 0
    return tf.where(hit, -1e9, logits)  # hit: (V,)


def greedy_decode(
    encode, step, source, start_id, end_id, max_length, banned_ids=()
):
    """Argmax decoding. Returns `(ids (B, L), attention (B, L, S))`."""
    source = tf.cast(source, "int64")
    source_mask = tf.not_equal(source, 0)
    memory, state = encode(source)
    batch = tf.shape(source)[0]
    prev = tf.fill([batch, 1], tf.cast(start_id, "int64"))
    done = tf.zeros([batch], "bool")
    ids = tf.TensorArray("int64", size=max_length)
    attn = tf.TensorArray(memory.dtype, size=max_length)
    for t in tf.range(max_length):
        logits, state, weights = step(prev, state, memory, source_mask)
        logits = ban(logits, banned_ids)
        nxt = tf.argmax(logits, axis=-1, output_type="int64")
        nxt = tf.where(done, tf.zeros_like(nxt), nxt)
        ids = ids.write(t, nxt)
        attn = attn.write(t, weights)
        done = done | tf.equal(nxt, end_id)
        prev = nxt[:, None]
    ids = tf.transpose(ids.stack(), [1, 0])
    return ids, tf.transpose(attn.stack(), [1, 0, 2])


def _gather_beams(x, indices, batch, beam):
    """`x` is `(B*K, ...)`; pick beams `indices (B, K)` per example."""
    shape = tf.shape(x)
    x = tf.reshape(x, tf.concat([[batch, beam], shape[1:]], 0))
    x = tf.gather(x, indices, batch_dims=1)
    return tf.reshape(x, shape)


def beam_search(
    encode,
    step,
    source,
    start_id,
    end_id,
    max_length,
    beam_width=4,
    length_penalty=0.6,
    banned_ids=(),
):
    """Beam search with the GNMT length penalty `((5 + len) / 6) ** α`.

    Returns the best `ids (B, L)` per example and the attention
    `(B, L, S)` along its path.
    """
    source = tf.cast(source, "int64")
    batch = tf.shape(source)[0]
    k = beam_width
    memory, state = encode(source)
    # Tile everything to (B*K, ...).
    tile = lambda x: tf.repeat(x, k, axis=0)  # noqa: E731
    memory, state = tile(memory), tile(state)
    source_mask = tile(tf.not_equal(source, 0))
    neg_inf = tf.constant(-1e9, "float32")
    # Only beam 0 is live at the start, so the K beams do not duplicate.
    scores = tf.tile(
        tf.concat([[0.0], tf.fill([k - 1], neg_inf)], 0)[None], [batch, 1]
    )  # (B, K) sums of log-probs
    finished = tf.zeros([batch, k], "bool")
    lengths = tf.zeros([batch, k], "float32")
    prev = tf.fill([batch * k, 1], tf.cast(start_id, "int64"))
    ids = tf.zeros([batch, k, 0], "int64")
    attn = tf.zeros([batch, k, 0, tf.shape(memory)[1]], memory.dtype)
    for _ in tf.range(max_length):
        tf.autograph.experimental.set_loop_options(
            shape_invariants=[
                (ids, tf.TensorShape([None, None, None])),
                (attn, tf.TensorShape([None, None, None, None])),
            ]
        )
        logits, new_state, weights = step(prev, state, memory, source_mask)
        logp = tf.nn.log_softmax(ban(logits, banned_ids))  # (B*K, V)
        vocab = tf.shape(logp)[-1]
        logp = tf.reshape(logp, [batch, k, vocab])
        # A finished beam only extends with padding, at no cost.
        pad_only = tf.one_hot(0, vocab, on_value=0.0, off_value=-1e9)
        logp = tf.where(finished[..., None], pad_only, logp)
        total = scores[..., None] + logp  # (B, K, V)
        new_len = lengths + tf.cast(~finished, "float32")
        penalty = ((5.0 + new_len) / 6.0) ** length_penalty  # (B, K)
        ranked = total / penalty[..., None]
        flat = tf.reshape(ranked, [batch, k * vocab])
        _, top = tf.math.top_k(flat, k=k)  # (B, K)
        beam_idx = top // vocab
        token = tf.cast(top % vocab, "int64")
        scores = tf.gather(
            tf.reshape(total, [batch, k * vocab]), top, batch_dims=1
        )
        lengths = tf.gather(new_len, beam_idx, batch_dims=1)
        was_done = tf.gather(finished, beam_idx, batch_dims=1)
        finished = was_done | tf.equal(token, end_id)
        ids = tf.concat(
            [tf.gather(ids, beam_idx, batch_dims=1), token[..., None]], -1
        )
        w = tf.reshape(weights, [batch, k, 1, -1])
        attn = tf.concat(
            [
                tf.gather(attn, beam_idx, batch_dims=1),
                tf.gather(w, beam_idx, batch_dims=1),
            ],
            2,
        )
        state = _gather_beams(new_state, beam_idx, batch, k)
        prev = tf.reshape(token, [batch * k, 1])
    final = scores / (((5.0 + lengths) / 6.0) ** length_penalty)
    best = tf.argmax(final, axis=-1, output_type="int32")  # (B,)
    return (
        tf.gather(ids, best, batch_dims=1),
        tf.gather(attn, best, batch_dims=1),
    )
