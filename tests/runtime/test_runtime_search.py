"""One search interface under every decode loop of the runtime
(`keras_attn_runtime.search`): `TokenSearch` (greedy or sampled) and
`BeamSearch` both `advance`, say what is `done`, what is `settled` and
what is `best`; `decided` and `Handover` hand an example's tokens over
once, whichever the search."""

import numpy as np
import pytest

from keras_attn_runtime.search import (
    BeamSearch,
    Handover,
    TokenSearch,
    decided,
    log_softmax,
    sample_with,
)

END = 2


def scripted_logits(rows, picks, vocab=7):
    """`(rows, vocab)` logits whose most likely token is `picks[r]`."""
    logits = np.zeros((rows, vocab), "float32")
    logits[np.arange(rows), picks] = 4.0
    return logits


def test_greedy_search_takes_the_most_likely_allowed_token():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 9)).astype("float32")
    logits[0, 0] = logits[1, 5] = 50.0  # padding and a banned id on top
    search = TokenSearch(3, END, banned_ids=(5,))
    kept, tokens = search.advance(logits)
    reference = logits.copy()
    reference[:, [0, 5]] = -np.inf
    assert kept is None
    np.testing.assert_array_equal(tokens, reference.argmax(-1))
    # The score is the log-probability of the token chosen, over the
    # logits with padding and the banned ids removed.
    z = np.where(np.isinf(reference), -1e9, reference)
    want = log_softmax(z)[np.arange(3), tokens]
    np.testing.assert_allclose(search.score, want, rtol=1e-6)


def test_a_finished_row_gives_padding_and_keeps_its_score():
    search = TokenSearch(2, [END, 3])
    search.advance(scripted_logits(2, [END, 4]))
    score = search.score.copy()
    search.advance(scripted_logits(2, [5, 3]))
    assert search.emitted.tolist() == [[END, 0], [4, 3]]
    assert search.done.tolist() == [True, True]
    assert search.score[0] == score[0] and search.score[1] < score[1]


def test_banned_ids_none_reads_the_logits_as_they_come():
    logits = scripted_logits(1, [0])
    assert TokenSearch(1, END, banned_ids=None).advance(logits)[1][0] == 0
    assert TokenSearch(1, END).advance(logits)[1][0] != 0


def test_sampling_draws_through_the_same_interface():
    logits = np.log(np.array([[0.0, 0.5, 0.2, 0.3]], "float32") + 1e-12)
    uniforms = np.array([[0.1], [0.6], [0.95]], "float32")
    search = TokenSearch(1, 9, sample_with(uniforms), banned_ids=None)
    got = [int(search.advance(logits)[1][0]) for _ in range(3)]
    assert got == [1, 2, 3]  # the inverse CDF at 0.1, 0.6, 0.95


def test_greedy_settles_every_token_and_hands_each_over_once():
    search = TokenSearch(1, END)
    handover, taken = Handover(search), []
    for token in (4, 5, END):
        search.advance(scripted_logits(1, [token]))
        taken.append(handover.take())
    assert [t[0][0] for t in taken] == [[4], [4, 5], [4, 5, END]]
    assert handover.finished
    assert handover.take() == [None]  # nothing after the answer


def test_a_beams_tokens_are_handed_over_when_they_agree():
    search = BeamSearch(1, END, beam_width=2)
    handover = Handover(search)
    # Step 1: two beams that differ at once: nothing settled.
    logits = np.full((2, 7), -9.0, "float32")
    logits[0, 4], logits[0, 5] = 1.0, 0.9
    search.advance(logits)
    assert search.settled()[0].tolist() == [] and handover.take() == [None]
    # Step 2: both beams come from beam 0 (token 4): 4 is settled.
    logits = np.full((2, 7), -9.0, "float32")
    logits[0, 3], logits[0, 6] = 2.0, 1.9
    kept, _ = search.advance(logits)
    assert kept.tolist() == [0, 0]
    ((ids, align),) = handover.take()
    assert ids == [4] and align is None
    # The end: the best hypothesis, up to its end, handed over once.
    logits = np.full((2, 7), -9.0, "float32")
    logits[:, END] = 3.0
    search.advance(logits)
    assert search.done.all()
    ((ids, _),) = handover.take()
    best = search.best()[0][0]
    assert ids == best[: len(ids)].tolist() and ids[-1] == END
    assert ids[0] == 4  # what was handed over begins it


def test_decided_trims_the_padding_after_the_end():
    search = TokenSearch(1, END)
    for token in (4, END):
        search.advance(scripted_logits(1, [token]), np.eye(3)[:1])
    search.done[:] = False  # as if another example still ran
    search.advance(scripted_logits(1, [5]), np.eye(3)[:1])
    ((ids, align),) = decided(search)
    assert ids == [4, END] and align.shape == (2, 3)


@pytest.mark.parametrize("kind", ["greedy", "beam"])
def test_a_last_step_hands_over_the_best_even_before_the_end(kind):
    search = TokenSearch(1, END) if kind == "greedy" else BeamSearch(1, END, 2)
    handover = Handover(search)
    search.advance(scripted_logits(search.k, [4] * search.k))
    ((ids, _),) = handover.take(last=True)
    assert ids == search.best()[0][0][:1].tolist() and handover.finished
