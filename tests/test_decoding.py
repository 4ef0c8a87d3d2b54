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
