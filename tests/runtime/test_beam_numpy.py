"""The runtime's NumPy beam search (`keras_attn_runtime.search.BeamSearch`)
ranks as `keras_attn.seq2seq`'s `BeamSampler`: the same decoder, one
Keras search and one NumPy loop, give the same hypotheses and scores."""

import keras
import numpy as np
import pytest

from keras_attn import seq2seq
from keras_attn_runtime.search import BeamSearch, banned, log_softmax

VOCAB, SOURCE, STEPS, END = 11, 5, 8, 2


def decoder():
    """`step_fn` (Keras) of a small recurrent decoder with an alignment
    over a 5-position source, and the same step for NumPy arrays."""
    rng = np.random.default_rng(3)
    embed = rng.normal(size=(VOCAB, 6)).astype("float32")
    mix = rng.normal(size=(6, 6)).astype("float32") * 0.6
    out = rng.normal(size=(6, VOCAB)).astype("float32") * 1.5
    out[:, END] -= 0.3
    keys = rng.normal(size=(6, SOURCE)).astype("float32")

    def step_fn(tokens, state, index):
        h = keras.ops.tanh(keras.ops.take(embed, tokens, axis=0) + state @ mix)
        align = keras.ops.softmax(h @ keys, axis=-1)
        return h @ out, h, align

    def numpy_step(tokens, state, index):
        return [
            keras.ops.convert_to_numpy(x) for x in step_fn(tokens, state, index)
        ]

    return step_fn, numpy_step


@pytest.mark.parametrize(
    "alpha, beta, width", [(0.6, 0.0, 3), (1.0, 0.4, 4), (0.0, 0.2, 2)]
)
def test_numpy_beam_search_ranks_as_beam_sampler(alpha, beta, width):
    step_fn, numpy_step = decoder()
    rng = np.random.default_rng(0)
    state = rng.normal(size=(3, 6)).astype("float32")
    mask = np.ones((3, SOURCE), bool)
    mask[1, 3:] = False  # a shorter source: padding out of the coverage
    want = seq2seq.beam_search(
        step_fn,
        state,
        1,
        END,
        STEPS,
        width,
        alpha,
        beta,
        source_mask=mask,
        banned_ids=(1,),
    )
    search = BeamSearch(3, END, width, alpha, beta, mask, banned_ids=(1,))
    rows = np.repeat(state, width, axis=0)
    tokens = np.full((3 * width,), 1, "int32")
    for index in range(STEPS):
        logits, rows, align = numpy_step(tokens, rows, index)
        kept, tokens = search.advance(logits, align)
        rows = rows[kept]
        if search.done.all():
            break
    ids, score, aligned = search.best()
    expected = keras.ops.convert_to_numpy(want["ids"])
    np.testing.assert_array_equal(ids, expected[:, : ids.shape[1]])
    np.testing.assert_allclose(
        aligned,
        keras.ops.convert_to_numpy(want["alignment"])[:, : ids.shape[1]],
        atol=1e-6,
    )
    assert not expected[:, ids.shape[1] :].any()
    np.testing.assert_allclose(
        score, keras.ops.convert_to_numpy(want["score"]), rtol=1e-5
    )
    assert len({tuple(r) for r in ids}) > 1  # not one answer for all


def test_settled_tokens_are_what_every_beam_holds():
    search = BeamSearch(1, END, beam_width=2)
    search.emitted = np.array([[5, 6, 7], [5, 6, 8]], "int32")
    assert search.settled()[0].tolist() == [5, 6]
    search.emitted = np.array([[5, 6, 7], [4, 6, 7]], "int32")
    assert search.settled()[0].tolist() == []


def test_banned_ids_and_padding_are_never_chosen():
    logits = np.zeros((2, 4), "float32")
    out = banned(logits, (3,))
    assert (out[:, [0, 3]] == -1e9).all() and (out[:, 1:3] == 0).all()
    np.testing.assert_allclose(np.exp(log_softmax(out)).sum(-1), 1.0, 1e-6)


def test_a_bad_beam_width_is_named():
    with pytest.raises(ValueError, match="beam_width=0"):
        BeamSearch(1, END, beam_width=0)
    with pytest.raises(ValueError, match="alignment=None"):
        BeamSearch(1, END, coverage_penalty=0.2).advance(
            np.zeros((4, VOCAB), "float32")
        )


def test_top_k_is_a_stable_sort_of_the_row():
    from keras_attn_runtime.search import top_k

    rng = np.random.default_rng(4)
    x = rng.integers(0, 5, size=(6, 40)).astype("float32")  # many ties
    for k in (1, 3, 7):
        want = np.argsort(-x, axis=-1, kind="stable")[:, :k]
        np.testing.assert_array_equal(top_k(x, k), want)


def test_end_ids_are_a_list_as_kerass_samplers_take_them():
    from keras_attn_runtime.search import is_end

    assert is_end(np.array([3, 4, 5]), [4, 5]).tolist() == [False, True, True]
    assert is_end(np.array([3, 4]), 4).tolist() == [False, True]
    # Either end token finishes a hypothesis: the two beams take one
    # each, and both are done.
    search = BeamSearch(1, [6, 7], beam_width=2)
    logits = np.full((2, 9), -5.0, "float32")
    logits[:, 6], logits[:, 7] = 5.0, 4.0
    search.advance(logits)
    assert sorted(search.emitted[:, -1].tolist()) == [6, 7]
    assert search.done.all()
    alone = BeamSearch(1, 6, beam_width=2)
    alone.advance(logits)
    assert alone.done.tolist().count(True) == 1  # 7 ends nothing there
