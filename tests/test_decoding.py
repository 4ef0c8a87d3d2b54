"""Greedy and beam search on a hand-made Markov chain with known optima."""

import numpy as np
import tensorflow as tf

from keras_attn import decoding

# Tokens: 0 pad, 1 start, 2 end, 3 "a", 4 "b".
P = np.full((5, 5), 1e-6)
P[1, 3], P[1, 4] = 0.6, 0.4  # start → a (greedy's pick) or b
P[3, 2] = P[3, 3] = P[3, 4] = 0.3333  # after a: anything, at 1/3
P[4, 2] = 1.0  # after b: end for sure
LOGP = tf.constant(np.log(P / P.sum(1, keepdims=True)), "float32")


def encode(source):
    batch = tf.shape(source)[0]
    return tf.zeros([batch, 3, 2]), tf.zeros([batch, 2])


def step(prev, state, memory, mask):
    logits = tf.gather(LOGP, prev[:, 0])
    attention = tf.ones([tf.shape(prev)[0], 3]) / 3.0
    return logits, state + 1.0, attention


def run(fn, **kwargs):
    source = tf.constant([[5, 6, 0], [7, 0, 0]])
    return [np.asarray(t) for t in fn(encode, step, source, 1, 2, 4, **kwargs)]


def test_greedy_takes_the_locally_best_token():
    ids, att = run(decoding.greedy_decode)
    assert ids[0, 0] == 3  # "a" first (0.6 > 0.4)
    assert att.shape == (2, 4, 3)


def test_beam_search_finds_the_better_sequence():
    ids, att = run(decoding.beam_search, beam_width=2, length_penalty=0.0)
    # "b end" has probability 0.4; every path through "a" at most 0.2.
    np.testing.assert_array_equal(ids[:, :2], [[4, 2], [4, 2]])
    assert np.all(ids[:, 2:] == 0)  # padding after the end
    assert att.shape == (2, 4, 3)


def test_beam_width_one_is_greedy():
    g, _ = run(decoding.greedy_decode)
    b, _ = run(decoding.beam_search, beam_width=1, length_penalty=0.0)
    np.testing.assert_array_equal(b, g)


def test_banned_token_is_never_emitted():
    # Banning "a" (greedy's first pick) makes both searches start with "b".
    for fn in (decoding.greedy_decode, decoding.beam_search):
        ids, _ = run(fn, banned_ids=(3,))
        assert not np.any(ids == 3), fn.__name__
        np.testing.assert_array_equal(ids[:, :2], [[4, 2], [4, 2]])


def test_ban_sets_only_the_banned_columns():
    logits = tf.constant([[0.5, 2.0, -1.0, 3.0]])
    out = np.asarray(decoding.ban(logits, (1, 3)))
    np.testing.assert_array_equal(out[0, [0, 2]], [0.5, -1.0])
    assert np.all(out[0, [1, 3]] <= -1e8)
    half = np.asarray(decoding.ban(tf.cast(logits, "float16"), (1,)))
    assert np.isfinite(half).all() and half[0, 1] < -1e4


def test_wide_beam_returns_the_exhaustive_gnmt_optimum():
    import itertools

    # A random chain over words 3..5 and end (2); pad and start banned.
    # With a beam wider than the number of hypotheses nothing is pruned,
    # so the result must be the best length-normalized sequence overall.
    rng = np.random.default_rng(7)
    for trial in range(4):
        logits = rng.normal(scale=2.0, size=(6, 6)).astype("float32")
        table = tf.constant(logits)

        def chain_step(prev, state, memory, mask, table=table):
            att = tf.ones([tf.shape(prev)[0], 3]) / 3.0
            return tf.gather(table, prev[:, 0]), state, att

        allowed = [2, 3, 4, 5]
        logp = logits[:, allowed] - np.log(
            np.exp(logits[:, allowed]).sum(1, keepdims=True)
        )
        col = {tok: j for j, tok in enumerate(allowed)}
        max_len = 3
        for alpha in (0.0, 0.6, 2.0):
            best, best_seq = -np.inf, None
            for n in range(1, max_len + 1):
                for seq in itertools.product(allowed, repeat=n):
                    if 2 in seq[:-1] or (n < max_len and seq[-1] != 2):
                        continue  # ends once, and only at its end
                    prev, total = 1, 0.0
                    for tok in seq:
                        total += logp[prev, col[tok]]
                        prev = tok
                    score = total / ((5.0 + n) / 6.0) ** alpha
                    if score > best:
                        best, best_seq = score, seq
            ids, _ = decoding.beam_search(
                encode,
                chain_step,
                tf.constant([[5, 6, 0]]),
                1,
                2,
                max_len,
                beam_width=64,
                length_penalty=alpha,
                banned_ids=(0, 1),
            )
            got = [int(t) for t in np.asarray(ids)[0] if t != 0]
            assert got == list(best_seq), (trial, alpha)
