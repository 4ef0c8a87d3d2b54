"""What tfa.seq2seq and KerasHub users migrate with: tfa's beam-search
conventions as options (the end token's length, coverage on finished
hypotheses only), every beam with its parents, `gather_tree`, top-p
sampling, several end tokens, a start token per example. NumPy references
and brute force on Markov chains (helpers of `test_search.py`); part of
the JAX and PyTorch suite."""

import numpy as np
import pytest
from keras import ops

from keras_attn.seq2seq import contrastive_search, gather_tree, search
from keras_attn.seq2seq.samplers.random import nucleus
from tests.search_cases import (
    END,
    START,
    chain,
    enumerate_hypotheses,
    strip,
)


def score(
    seq, total, alpha, beta, attention, count_end, finished_only, steps=3
):
    """GNMT's score; with `count_end=False`, tfa's length: the end token
    is counted once the hypothesis has waited a step in the beam, so only
    a hypothesis finished at the last of the `steps` run goes without."""
    last = seq[-1] == END and len(seq) == steps
    length = len(seq) - (1 if not count_end and last else 0)
    value = total / ((5.0 + length) / 6.0) ** alpha
    if beta and (seq[-1] == END or not finished_only):
        cov = sum(attention[p] for p in (START, *seq[:-1]))
        value += beta * np.log(np.clip(cov, 1e-10, 1.0)).sum()
    return value


@pytest.mark.parametrize("count_end", [True, False])
@pytest.mark.parametrize("finished_only", [False, True])
def test_wide_beam_is_the_exhaustive_optimum_under_each_convention(
    count_end, finished_only
):
    rng = np.random.default_rng(3)
    allowed = [2, 3, 4, 5]
    for trial in range(4):
        logits = rng.normal(scale=2.0, size=(6, 6)).astype("float32")
        attention = rng.dirichlet(np.ones(3) * 0.3, size=6).astype("float32")
        args = (1.0, 0.5, attention, count_end, finished_only)
        best = max(
            enumerate_hypotheses(logits, 3, allowed),
            key=lambda h: score(*h, *args),
        )
        out = search.beam_search(
            chain(logits, attention),
            np.zeros((1, 1), "float32"),
            START,
            END,
            3,
            beam_width=64,
            length_penalty=1.0,
            coverage_penalty=0.5,
            banned_ids=(1,),
            count_end_token=count_end,
            coverage_on_finished_only=finished_only,
        )
        assert strip(out["ids"][0]) == list(best[0]), trial
        np.testing.assert_allclose(
            ops.convert_to_numpy(out["score"])[0],
            score(*best, *args),
            rtol=1e-4,
        )


@pytest.mark.slow
def test_the_conventions_do_choose_differently():
    """On some chain the tfa options pick another hypothesis than the
    defaults (so the options are not a no-op)."""
    rng = np.random.default_rng(0)
    differ = 0
    for _ in range(30):
        logits = rng.normal(scale=2.0, size=(6, 6)).astype("float32")
        attention = rng.dirichlet(np.ones(3) * 0.3, size=6).astype("float32")
        picks = [
            strip(
                search.beam_search(
                    chain(logits, attention),
                    np.zeros((1, 1), "float32"),
                    START,
                    END,
                    3,
                    beam_width=64,
                    length_penalty=1.0,
                    coverage_penalty=0.5,
                    banned_ids=(1,),
                    count_end_token=tfa,
                    coverage_on_finished_only=tfa,
                )["ids"][0]
            )
            for tfa in (True, False)
        ]
        differ += picks[0] != picks[1]
    assert differ > 0


def np_gather_tree(step_ids, parent_ids, lengths, end):
    """tfa's gather_tree kernel, loop by loop, on `(T, B, K)`."""
    steps, batch, width = step_ids.shape
    out = np.full(step_ids.shape, end)
    for b in range(batch):
        length = min(steps, lengths[b])
        for k in range(width):
            if length <= 0:
                continue
            out[length - 1, b, k] = step_ids[length - 1, b, k]
            parent = parent_ids[length - 1, b, k]
            for level in range(length - 2, -1, -1):
                if parent < 0 or parent >= width:
                    out[level, b, k] = -1
                    break
                out[level, b, k] = step_ids[level, b, parent]
                parent = parent_ids[level, b, parent]
            done = False
            for t in range(length):
                if done:
                    out[t, b, k] = end
                elif out[t, b, k] == end:
                    done = True
    return out


def test_gather_tree_matches_tfa_kernel_on_random_records():
    rng = np.random.default_rng(1)
    for _ in range(20):
        steps, batch, width = rng.integers(1, 7), rng.integers(1, 4), 3
        step_ids = rng.integers(0, 6, size=(steps, batch, width))
        parents = rng.integers(-1, width + 1, size=(steps, batch, width))
        parents = np.where(
            rng.random(parents.shape) < 0.8, parents % width, parents
        )
        lengths = rng.integers(0, steps + 2, size=batch)
        got = ops.convert_to_numpy(gather_tree(step_ids, parents, lengths, 5))
        np.testing.assert_array_equal(
            got, np_gather_tree(step_ids, parents, lengths, 5)
        )


def test_all_beams_and_their_records_rebuild_with_gather_tree():
    rng = np.random.default_rng(4)
    logits = rng.normal(scale=2.0, size=(7, 7)).astype("float32")
    out = search.beam_search(
        chain(logits),
        np.zeros((2, 1), "float32"),
        START,
        END,
        5,
        beam_width=3,
        banned_ids=(1,),
        return_all_beams=True,
    )
    beams = ops.convert_to_numpy(out["beam_ids"])  # (B, K, L)
    assert beams.shape == (2, 3, 5)
    np.testing.assert_array_equal(beams[:, 0], ops.convert_to_numpy(out["ids"]))
    scores = ops.convert_to_numpy(out["beam_scores"])
    assert np.all(np.diff(scores, axis=1) <= 0)  # best first
    step_ids = np.transpose(ops.convert_to_numpy(out["step_ids"]), (1, 0, 2))
    parents = np.transpose(ops.convert_to_numpy(out["parent_ids"]), (1, 0, 2))
    rebuilt = np.transpose(
        ops.convert_to_numpy(gather_tree(step_ids, parents, [5, 5], END)),
        (1, 2, 0),
    )  # (B, K, L), the beams in their last-step order
    # Each final beam is one of the rebuilt ones (up to padding after END).
    for b in range(2):
        tidy = [strip(np.where(r == END, 0, r)) for r in rebuilt[b]]
        for row in beams[b]:
            assert strip(np.where(row == END, 0, row)) in tidy


def np_nucleus(logits, p):
    order = np.argsort(-logits, kind="stable")
    probs = np.exp(logits[order] - logits.max())
    probs /= probs.sum()
    before = np.cumsum(probs) - probs
    kept = set(order[before < p].tolist())
    cut = min(logits[list(kept)])
    return {i for i in range(len(logits)) if logits[i] >= cut}


def test_top_p_keeps_exactly_the_nucleus():
    rng = np.random.default_rng(2)
    logits = rng.normal(scale=2.0, size=(5, 9)).astype("float32")
    for p in (0.1, 0.5, 0.9, 1.0):
        out = ops.convert_to_numpy(nucleus(logits, p))
        for row, got in zip(logits, out, strict=True):
            kept = set(np.flatnonzero(got > -1e8).tolist())
            assert kept == np_nucleus(row, p), p


def test_sampling_with_top_p_only_draws_from_the_nucleus():
    p = np.full((6, 6), 1e-3)
    p[START, 2:] = [0.05, 0.5, 0.3, 0.15]  # nucleus at 0.7: tokens 3 and 4
    p[3:, END] = 1.0
    logits = np.log(p / p.sum(1, keepdims=True)).astype("float32")
    drawn = set()
    for seed in range(40):
        out = search.sample_search(
            chain(logits), np.zeros((4, 1)), START, END, 2, seed=seed, top_p=0.7
        )
        drawn |= set(ops.convert_to_numpy(out["ids"])[:, 0].tolist())
    assert drawn == {3, 4}


def test_several_end_tokens_and_a_start_token_per_example():
    p = np.full((6, 6), 1e-6)
    p[1, 3], p[3, 4], p[4, 5], p[5, 2] = 1, 1, 1, 1  # 1→3→4→5→2
    p[0, 4] = 1  # start 0 → 4 → 5 → 2
    logits = np.log(p).astype("float32")
    starts = np.array([1, 0], "int32")
    out = search.greedy_search(chain(logits), np.zeros((2, 1)), starts, 2, 6)
    ids = ops.convert_to_numpy(out["ids"]).tolist()
    assert ids == [[3, 4, 5, 2, 0, 0], [4, 5, 2, 0, 0, 0]]
    out = search.greedy_search(
        chain(logits), np.zeros((2, 1)), starts, [5, 2], 6
    )
    assert ops.convert_to_numpy(out["ids"]).tolist() == [
        [3, 4, 5, 0, 0, 0],
        [4, 5, 0, 0, 0, 0],
    ]
    beam = search.beam_search(
        chain(logits), np.zeros((2, 1)), starts, [5, 2], 6, beam_width=2
    )
    assert ops.convert_to_numpy(beam["ids"]).tolist() == [
        [3, 4, 5, 0, 0, 0],
        [4, 5, 0, 0, 0, 0],
    ]


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"end_id": []}, "end_id"),
        ({"end_id": [2, -1]}, "end_id"),
        ({"start_id": -3}, "start_id=-3"),
        ({"top_p": 0.0}, "top_p=0.0"),
        ({"top_p": 1.5}, "top_p=1.5"),
    ],
)
def test_bad_arguments_are_named(kwargs, needle):
    args = {"start_id": 1, "end_id": 2, "top_p": None, **kwargs}
    with pytest.raises(ValueError, match=needle):
        search.sample_search(
            chain(np.zeros((3, 3), "float32")),
            np.zeros((1, 1)),
            args["start_id"],
            args["end_id"],
            3,
            top_p=args["top_p"],
        )


def _sin_cos(state):
    return ops.concatenate([ops.sin(state), ops.cos(state)], axis=-1)


@pytest.mark.slow
def test_the_new_options_compile():
    """tfa's conventions, all beams, several end tokens, per-example start
    tokens and top-p under `jax.jit` / `tf.function` equal eager runs."""
    import keras

    rng = np.random.default_rng(9)
    logits = rng.normal(size=(6, 6)).astype("float32")
    attention = rng.dirichlet(np.ones(3), size=6).astype("float32")
    step = chain(logits, attention)
    state = np.zeros((2, 1), "float32")
    starts = np.array([1, 3], "int32")

    def run(s):
        b = search.beam_search(
            step,
            s,
            starts,
            [2, 5],
            5,
            3,
            coverage_penalty=0.3,
            banned_ids=(1,),
            count_end_token=False,
            coverage_on_finished_only=True,
            return_all_beams=True,
            output_all_scores=True,
        )
        p = search.sample_search(step, s, 1, 2, 5, seed=3, top_p=0.8)
        c = contrastive_search(step, s, 1, 2, 5, _sin_cos, 3, 0.6)
        beams = b["ids"], b["beam_ids"], b["parent_ids"], b["all_scores"]
        return (*beams, p["ids"], c["ids"])

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
        c = ops.convert_to_numpy(c)
        if e.dtype.kind == "f":  # scores: the compiled graph may fuse ops
            np.testing.assert_allclose(e, c, rtol=1e-6)
        else:  # ids: exactly
            np.testing.assert_array_equal(e, c)


def test_count_end_token_false_is_tfas_convention_on_its_numbers():
    """tfa's `BeamSearchDecoder` leaves the end token out of `|Y|` at the
    step where it is chosen, then counts it while the hypothesis waits in
    the beam. End and word at 0.5/0.5 first, then end at 0.9 after the
    word, `α = 1`, two beams, two steps: tfa ranks `[end]` at
    `log 0.5 / lp(1) = −0.693` above `[word, end]` at
    `(log 0.5 + log 0.9) / lp(1) = −0.799`."""
    word = 3
    p = np.full((5, 5), 1e-9)
    p[START, END], p[START, word] = 0.5, 0.5
    p[word, END], p[word, word] = 0.9, 0.1

    def search_with(**convention):
        return search.beam_search(
            chain(np.log(p)),
            np.zeros((1, 1), "float32"),
            START,
            END,
            2,
            beam_width=2,
            length_penalty=1.0,
            banned_ids=(1, 4),
            **convention,
        )

    out = search_with(count_end_token=False, return_all_beams=True)
    assert strip(out["ids"][0]) == [END]
    np.testing.assert_allclose(
        ops.convert_to_numpy(out["beam_scores"])[0],
        [np.log(0.5), np.log(0.5) + np.log(0.9)],
        rtol=1e-4,
    )
    # GNMT's own `|Y|` counts the end at once: `[end]` is at
    # log 0.5 / lp(1) too, `[word, end]` at / lp(2) = 7/6, so it wins.
    gnmt = search_with()
    np.testing.assert_allclose(
        ops.convert_to_numpy(gnmt["score"])[0],
        (np.log(0.5) + np.log(0.9)) / (7 / 6),
        rtol=1e-4,
    )


def test_all_scores_are_every_continuations_ranked_score():
    """tfa's `output_all_scores`: per step, the score of every token after
    every beam of the step before, `(B, T, K, V)`; the chosen `K` are its
    top `K`, and at the first step only beam 0 is live."""
    rng = np.random.default_rng(5)
    logits = rng.normal(scale=2.0, size=(6, 6)).astype("float32")
    out = search.beam_search(
        chain(logits),
        np.zeros((2, 1), "float32"),
        START,
        END,
        4,
        beam_width=3,
        length_penalty=0.6,
        banned_ids=(1,),
        return_all_beams=True,
        output_all_scores=True,
    )
    every = ops.convert_to_numpy(out["all_scores"])
    assert every.shape == (2, 4, 3, 6)
    chosen = ops.convert_to_numpy(out["step_scores"])  # (B, T, K)
    steps = int((np.abs(chosen).sum(axis=(0, 2)) > 0).sum())
    for t in range(steps):
        flat = every[:, t].reshape(2, -1)
        top = -np.sort(-flat, axis=1)[:, :3]
        np.testing.assert_allclose(top, chosen[:, t], rtol=1e-5)
    allowed = [2, 3, 4, 5]  # banned: padding and 1
    row = logits[START, allowed]
    logp = row - np.log(np.exp(row).sum())
    lp = ((5.0 + 1.0) / 6.0) ** 0.6
    np.testing.assert_allclose(every[0, 0, 0, allowed], logp / lp, rtol=1e-5)
    assert np.all(every[:, 0, 1:] < -1e8)  # beams 1, 2 are not live yet
    plain = search.beam_search(
        chain(logits), np.zeros((2, 1), "float32"), START, END, 4, 3
    )
    assert "all_scores" not in plain


def test_the_runtime_scores_and_ends_beams_as_the_samplers_do():
    """The runtime's NumPy search (`keras_attn_runtime.search`) and the
    Keras samplers write GNMT's penalties and the end test once each, an
    engine each; they give the same numbers on every backend."""
    from keras_attn.seq2seq.samplers import beam
    from keras_attn.seq2seq.samplers.base import is_end
    from keras_attn_runtime import search as runtime

    rng = np.random.default_rng(3)
    lengths = np.arange(1, 40, dtype="float32")
    for alpha in (0.0, 0.6, 1.0):
        np.testing.assert_allclose(
            runtime.length_penalty_factor(lengths, alpha),
            ops.convert_to_numpy(beam.length_penalty_factor(lengths, alpha)),
            rtol=1e-6,
        )
    coverage = rng.uniform(0.0, 2.0, (3, 4, 7)).astype("float32")
    coverage[0, 0, :2] = 0.0  # never attended: log(1e-10), not -inf
    mask = rng.uniform(size=(3, 1, 7)) > 0.3
    for source_mask in (None, mask):
        np.testing.assert_allclose(
            runtime.coverage_penalty_value(coverage, 0.2, source_mask),
            ops.convert_to_numpy(
                beam.coverage_penalty_value(coverage, 0.2, source_mask)
            ),
            rtol=1e-5,
        )
    tokens = rng.integers(0, 6, (4, 5)).astype("int32")
    for end in (2, [2, 5]):
        np.testing.assert_array_equal(
            runtime.is_end(tokens, end),
            ops.convert_to_numpy(is_end(tokens, end)),
        )
