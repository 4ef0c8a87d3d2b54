"""`keras_attn.seq2seq` searches against brute force on hand-made chains.

The decoders here are Markov chains over a tiny vocabulary, so every
hypothesis can be enumerated: greedy must follow the argmax, a beam wider
than the hypothesis space must return the exhaustive optimum of the GNMT
score, sampling must follow the chain's distribution. Runs on every
backend (`tests/test_backends.py`), also compiled (`jax.jit`,
`tf.function`).
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.seq2seq import search
from tests.search_cases import (  # noqa: F401 (the names its tests use)
    END,
    PAD,
    START,
    chain,
    enumerate_hypotheses,
    gnmt_score,
    strip,
)


def test_greedy_follows_the_argmax_and_pads_after_the_end():
    p = np.full((5, 5), 1e-6)
    p[START, 3], p[START, 4] = 0.6, 0.4
    p[3, 4], p[4, END] = 0.9, 0.9
    out = search.greedy_search(chain(np.log(p)), np.zeros((2, 1)), 1, 2, 5)
    ids = ops.convert_to_numpy(out["ids"])
    np.testing.assert_array_equal(ids, [[3, 4, 2, 0, 0]] * 2)
    assert out["alignment"] is None


def test_beam_finds_the_sequence_greedy_misses():
    # start → a (0.6, greedy) then anything at 1/3; start → b (0.4) → end.
    p = np.full((5, 5), 1e-6)
    p[START, 3], p[START, 4] = 0.6, 0.4
    p[3, 2] = p[3, 3] = p[3, 4] = 1 / 3
    p[4, END] = 1.0
    step = chain(np.log(p))
    greedy = search.greedy_search(step, np.zeros((1, 1)), 1, 2, 4)
    beam = search.beam_search(
        step, np.zeros((1, 1)), 1, 2, 4, beam_width=2, length_penalty=0.0
    )
    assert strip(greedy["ids"][0])[0] == 3
    assert strip(beam["ids"][0]) == [4, 2]
    np.testing.assert_allclose(
        ops.convert_to_numpy(beam["score"]), [np.log(0.4)], atol=1e-4
    )


def test_beam_width_one_is_greedy():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(6, 6)).astype("float32")
    state = np.zeros((3, 2), "float32")
    g = search.greedy_search(chain(logits), state, 1, 2, 5, banned_ids=(1,))
    b = search.beam_search(
        chain(logits), state, 1, 2, 5, 1, 0.0, banned_ids=(1,)
    )
    np.testing.assert_array_equal(
        ops.convert_to_numpy(b["ids"]), ops.convert_to_numpy(g["ids"])
    )


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_wide_beam_returns_the_exhaustive_optimum(alpha):
    # Nothing is pruned with a beam wider than the hypothesis space, so the
    # result must be the best length-normalized sequence overall (fails if
    # the final normalization or the end-token handling is wrong).
    rng = np.random.default_rng(7)
    allowed = [2, 3, 4, 5]
    for trial in range(4):
        logits = rng.normal(scale=2.0, size=(6, 6)).astype("float32")
        best = max(
            enumerate_hypotheses(logits, 3, allowed),
            key=lambda h: gnmt_score(*h, alpha),
        )
        out = search.beam_search(
            chain(logits),
            np.zeros((1, 1), "float32"),
            1,
            2,
            3,
            beam_width=64,
            length_penalty=alpha,
            banned_ids=(1,),
        )
        assert strip(out["ids"][0]) == list(best[0]), (trial, alpha)
        np.testing.assert_allclose(
            ops.convert_to_numpy(out["score"])[0],
            gnmt_score(*best, alpha),
            rtol=1e-4,
        )


def test_wide_beam_with_coverage_penalty_returns_the_exhaustive_optimum():
    rng = np.random.default_rng(11)
    allowed = [2, 3, 4, 5]
    mask = np.array([True, True, True, False])  # the last position is padding
    for trial in range(4):
        logits = rng.normal(scale=1.5, size=(6, 6)).astype("float32")
        attention = rng.dirichlet(np.ones(4) * 0.3, size=6).astype("float32")
        attention[:, 3] = 0.0  # nothing attends to padding
        attention /= attention.sum(1, keepdims=True)
        for beta in (0.2, 1.0):
            best = max(
                enumerate_hypotheses(logits, 3, allowed),
                key=lambda h, b=beta: gnmt_score(*h, 0.6, b, attention, mask),
            )
            out = search.beam_search(
                chain(logits, attention),
                np.zeros((1, 1), "float32"),
                1,
                2,
                3,
                beam_width=64,
                length_penalty=0.6,
                coverage_penalty=beta,
                source_mask=mask[None],
                banned_ids=(1,),
            )
            assert strip(out["ids"][0]) == list(best[0]), (trial, beta)
            expected = gnmt_score(*best, 0.6, beta, attention, mask)
            got = ops.convert_to_numpy(out["score"])[0]
            np.testing.assert_allclose(got, expected, rtol=1e-4)


def test_alignment_follows_the_chosen_path():
    rng = np.random.default_rng(5)
    logits = rng.normal(scale=2.0, size=(6, 6)).astype("float32")
    attention = rng.dirichlet(np.ones(3), size=6).astype("float32")
    for fn, kwargs in (
        (search.greedy_search, {}),
        (search.beam_search, {"beam_width": 3}),
    ):
        out = fn(
            chain(logits, attention),
            np.zeros((2, 1)),
            1,
            2,
            4,
            banned_ids=(1,),
            **kwargs,
        )
        ids = ops.convert_to_numpy(out["ids"])[0]
        got = ops.convert_to_numpy(out["alignment"])[0]
        prev = START
        for t, tok in enumerate(ids):
            if tok == 0:
                np.testing.assert_array_equal(got[t], 0.0)
                continue
            np.testing.assert_allclose(got[t], attention[prev], rtol=1e-6)
            prev = tok


def test_banned_tokens_and_padding_are_never_emitted():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(6, 6)).astype("float32")
    logits[:, 0] = 50.0  # padding would win everywhere
    logits[:, 3] = 40.0  # then "a"
    state = np.zeros((4, 1), "float32")
    outs = [
        search.greedy_search(chain(logits), state, 1, 2, 6, (1, 3)),
        search.beam_search(chain(logits), state, 1, 2, 6, 3, banned_ids=(1, 3)),
        search.sample_search(
            chain(logits), state, 1, 2, 6, seed=1, banned_ids=(1, 3)
        ),
    ]
    for out in outs:
        ids = ops.convert_to_numpy(out["ids"])
        assert not np.isin(ids, [1, 3]).any()
        for row in ids:  # padding only after the end token
            ends = np.flatnonzero(row == END)
            first_pad = np.flatnonzero(row == 0)
            if first_pad.size:
                assert ends.size and ends[0] < first_pad[0]


def test_sampling_follows_the_distribution_and_the_seed():
    # One step from start: empirical frequencies over 4,000 draws.
    p = np.full((6, 6), 1e-9)
    p[START, 3:6] = [0.5, 0.3, 0.2]
    p[3:6, END] = 1.0
    logits = np.log(p).astype("float32")
    state = np.zeros((4000, 1), "float32")
    out = search.sample_search(chain(logits), state, 1, 2, 2, seed=4)
    first = ops.convert_to_numpy(out["ids"])[:, 0]
    freq = [np.mean(first == t) for t in (3, 4, 5)]
    np.testing.assert_allclose(freq, [0.5, 0.3, 0.2], atol=0.03)
    again = search.sample_search(chain(logits), state, 1, 2, 2, seed=4)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(again["ids"])[:, 0], first
    )
    # top_k=1 is greedy; a low temperature nearly so.
    top1 = search.sample_search(chain(logits), state, 1, 2, 2, top_k=1, seed=4)
    assert np.all(ops.convert_to_numpy(top1["ids"])[:, 0] == 3)
    top2 = search.sample_search(chain(logits), state, 1, 2, 2, top_k=2, seed=4)
    assert set(ops.convert_to_numpy(top2["ids"])[:, 0]) == {3, 4}
    cold = search.sample_search(
        chain(logits), state, 1, 2, 2, temperature=0.05, seed=4
    )
    assert np.mean(ops.convert_to_numpy(cold["ids"])[:, 0] == 3) > 0.99


@pytest.mark.slow
def test_searches_compile():
    rng = np.random.default_rng(9)
    logits = rng.normal(size=(6, 6)).astype("float32")
    attention = rng.dirichlet(np.ones(3), size=6).astype("float32")
    step = chain(logits, attention)
    state = np.zeros((2, 1), "float32")

    def run(s):
        g = search.greedy_search(step, s, 1, 2, 5, banned_ids=(1,))
        b = search.beam_search(
            step, s, 1, 2, 5, 3, coverage_penalty=0.3, banned_ids=(1,)
        )
        return g["ids"], b["ids"], b["alignment"]

    eager = [ops.convert_to_numpy(x) for x in run(state)]
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        compiled = jax.jit(run)(state)
    elif backend == "tensorflow":
        import tensorflow as tf

        fn = tf.function(
            run, input_signature=[tf.TensorSpec([None, 1], tf.float32)]
        )
        compiled = fn(state)
    else:
        pytest.skip("PyTorch runs the loop eagerly")
    for e, c in zip(eager, compiled, strict=True):
        np.testing.assert_array_equal(e, ops.convert_to_numpy(c))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_length": 0}, "max_length"),
        ({"end_id": -1}, "end_id"),
        ({"beam_width": 0}, "beam_width"),
        ({"coverage_penalty": 0.5}, "coverage_penalty"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    args = {"start_id": 1, "end_id": 2, "max_length": 3, **kwargs}
    with pytest.raises(ValueError, match=match):
        search.beam_search(chain(np.zeros((4, 4))), np.zeros((1, 1)), **args)


def test_bad_sampling_arguments_are_named():
    step = chain(np.zeros((4, 4)))
    with pytest.raises(ValueError, match="temperature=0"):
        search.sample_search(step, np.zeros((1, 1)), 1, 2, 3, temperature=0)
    with pytest.raises(ValueError, match="top_k=0"):
        search.sample_search(step, np.zeros((1, 1)), 1, 2, 3, top_k=0)
