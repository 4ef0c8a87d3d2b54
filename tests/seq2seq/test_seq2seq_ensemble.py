"""`keras_attn.seq2seq.ensemble` against NumPy and brute force.

Runs on every backend (`tests/test_backends.py`).
"""

import numpy as np
import pytest
from keras import ops

from keras_attn.seq2seq import beam_search, ensemble, greedy_search
from tests.search_cases import chain, enumerate_hypotheses, gnmt_score, strip


def member(logits, attention=None):
    """A chain decoder (`test_search.chain`) with an encoder that returns
    a member-specific state, to check each member gets its own back."""
    return (lambda source: ops.zeros_like(source)), chain(logits, attention)


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_step_is_the_log_of_the_weighted_mean_probability():
    rng = np.random.default_rng(0)
    logits = [rng.normal(scale=2, size=(5, 5)).astype("float32") for _ in "abc"]
    attention = [
        rng.dirichlet(np.ones(4), size=5).astype("float32") for _ in "abc"
    ]
    weights = [1.0, 2.0, 1.0]
    encode, step_fn = ensemble(
        [member(lg, at) for lg, at in zip(logits, attention, strict=True)],
        weights,
    )
    state = encode(np.zeros((2, 1), "float32"))
    assert len(state) == 3
    tokens = np.array([1, 3], "int32")
    logp, state, align = step_fn(tokens, state, 0)
    w = np.array(weights) / 4.0
    expected = np.log(
        sum(wk * softmax(lg[tokens]) for wk, lg in zip(w, logits, strict=True))
    )
    np.testing.assert_allclose(ops.convert_to_numpy(logp), expected, atol=1e-5)
    expected_align = sum(
        wk * at[tokens] for wk, at in zip(w, attention, strict=True)
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(align), expected_align, atol=1e-6
    )
    for s in state:  # each member's state came back stepped once
        np.testing.assert_array_equal(ops.convert_to_numpy(s), 1.0)


def test_identical_members_decode_like_one_model():
    rng = np.random.default_rng(1)
    logits = rng.normal(scale=2, size=(6, 6)).astype("float32")
    source = np.zeros((3, 2), "float32")
    encode, step_fn = ensemble([member(logits), member(logits)])
    for search, kwargs in (
        (greedy_search, {}),
        (beam_search, {"beam_width": 3}),
    ):
        one = search(chain(logits), source, 1, 2, 5, banned_ids=(1,), **kwargs)
        two = search(
            step_fn, encode(source), 1, 2, 5, banned_ids=(1,), **kwargs
        )
        np.testing.assert_array_equal(
            ops.convert_to_numpy(two["ids"]), ops.convert_to_numpy(one["ids"])
        )


def test_wide_beam_over_an_ensemble_returns_the_exhaustive_optimum():
    # The ensemble is a decoder whose next-token distribution is the mean
    # of the members'; a beam wider than the hypothesis space must return
    # the best sequence under that mean (not under either member).
    rng = np.random.default_rng(7)
    allowed = [2, 3, 4, 5]
    for trial in range(4):
        a, b = (
            rng.normal(scale=2.0, size=(6, 6)).astype("float32") for _ in "ab"
        )
        mean = np.log(0.25 * softmax(a) + 0.75 * softmax(b))
        best = max(
            enumerate_hypotheses(mean, 3, allowed),
            key=lambda h: gnmt_score(*h, 0.6),
        )
        encode, step_fn = ensemble([member(a), member(b)], [1.0, 3.0])
        out = beam_search(
            step_fn,
            encode(np.zeros((1, 1), "float32")),
            1,
            2,
            3,
            beam_width=64,
            length_penalty=0.6,
            banned_ids=(1,),
        )
        assert strip(out["ids"][0]) == list(best[0]), trial
        np.testing.assert_allclose(
            ops.convert_to_numpy(out["score"])[0],
            gnmt_score(*best, 0.6),
            rtol=1e-4,
        )


def test_members_without_alignment_give_none():
    logits = np.zeros((4, 4), "float32")
    encode, step_fn = ensemble(
        [member(logits), member(logits, np.ones((4, 2)))]
    )
    _, _, align = step_fn(np.array([0]), encode(np.zeros((1, 1))), 0)
    assert align is None


@pytest.mark.parametrize(
    "members, weights, match",
    [
        ([], None, "members"),
        ([lambda s: s], None, "members"),
        ([member(np.zeros((2, 2)))], [1.0, 1.0], "weights"),
        ([member(np.zeros((2, 2)))] * 2, [-1.0, 2.0], "weights"),
        ([member(np.zeros((2, 2)))] * 2, [0.0, 0.0], "weights"),
    ],
)
def test_bad_arguments_are_named(members, weights, match):
    with pytest.raises(ValueError, match=match):
        ensemble(members, weights)
