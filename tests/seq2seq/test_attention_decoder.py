"""`AttentionDecoder` against a NumPy reference written from the formulas.

A GRU step, the general score `sᵀWh`, the masked softmax and Luong's
`s̃_t = tanh(W_c [a_t; s_t] + b_c)` with input feeding, in NumPy; then
teacher forcing equal to step-by-step decoding for every order, feeding
and cell; masks; saving. Runs on every backend (`tests/test_backends.py`).
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.seq2seq import AttentionDecoder
from tests.backend import gradients, to_numpy
from tests.layer_test_case import (
    assert_config_round_trip,
    assert_model_round_trips,
    np_masked_softmax,
)

RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 5, 4)).astype("float32")
MEMORY = RNG.normal(size=(2, 3, 6)).astype("float32")
MEMORY_MASK = np.array([[True, True, False], [True, True, True]])


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def np_gru(x, h, kernel, recurrent, bias):
    """Keras's GRU step, `reset_after=True`, gates in the order z, r, h."""
    u = h.shape[-1]
    mx = x @ kernel + bias[0]
    mh = h @ recurrent + bias[1]
    z = sigmoid(mx[:, :u] + mh[:, :u])
    r = sigmoid(mx[:, u : 2 * u] + mh[:, u : 2 * u])
    hh = np.tanh(mx[:, 2 * u :] + r * mh[:, 2 * u :])
    return z * h + (1 - z) * hh


def np_luong_decoder(decoder, x, memory, memory_mask, bahdanau=False):
    cell = decoder.cell
    kernel, recurrent, bias = [to_numpy(w) for w in cell.weights]
    w_score = to_numpy(decoder.attention.kernel)
    w_c, b_c = [to_numpy(w) for w in decoder.attentional_layer.weights]
    batch, steps, _ = x.shape
    h = np.zeros((batch, cell.units), "float32")
    fed = np.zeros((batch, w_c.shape[1]), "float32")
    outs, aligns = [], []

    def attend(s):
        scores = np.einsum("bd,de,bse->bs", s, w_score, memory)
        alpha = np_masked_softmax(scores, memory_mask)
        return np.einsum("bs,bsd->bd", alpha, memory), alpha

    for t in range(steps):
        if bahdanau:  # attend with the previous state, step on the context
            a, alpha = attend(h)
            h = np_gru(
                np.concatenate([x[:, t], fed, a], -1),
                h,
                kernel,
                recurrent,
                bias,
            )
        else:
            h = np_gru(
                np.concatenate([x[:, t], fed], -1), h, kernel, recurrent, bias
            )
            a, alpha = attend(h)
        fed = np.tanh(np.concatenate([a, h], -1) @ w_c + b_c)
        outs.append(fed)
        aligns.append(alpha)
    return np.stack(outs, 1), np.stack(aligns, 1), h


@pytest.mark.parametrize("order", ["luong", "bahdanau"])
def test_matches_the_numpy_reference(order):
    decoder = AttentionDecoder(
        keras.layers.GRUCell(8),
        score="general",
        attention_order=order,
        attentional_units=7,
        input_feeding=True,
    )
    out, align, states = decoder(X, MEMORY, memory_mask=MEMORY_MASK)
    want_out, want_align, want_h = np_luong_decoder(
        decoder, X, MEMORY, MEMORY_MASK, bahdanau=order == "bahdanau"
    )
    np.testing.assert_allclose(to_numpy(out), want_out, atol=2e-5)
    np.testing.assert_allclose(to_numpy(align), want_align, atol=2e-5)
    np.testing.assert_allclose(to_numpy(states[0]), want_h, atol=2e-5)
    np.testing.assert_allclose(to_numpy(states[1]), want_out[:, -1], atol=2e-5)
    assert np.all(to_numpy(align)[0, :, 2] == 0.0)  # padded memory: exactly 0


CONFIGS = [
    (cell, score, order, feeding, units)
    for cell in ("gru", "lstm")
    for score, order, feeding, units in [
        ("additive", "luong", False, 7),
        ("dot", "luong", False, None),
        ("scaled_dot", "luong", True, None),
        ("general", "bahdanau", False, 7),
        ("low_rank", "bahdanau", True, 7),
    ]
]


def make(cell, score, order, feeding, units):
    cell = (
        keras.layers.GRUCell(6) if cell == "gru" else keras.layers.LSTMCell(6)
    )
    return AttentionDecoder(
        cell,
        score=score,
        rank=3,
        attention_order=order,
        input_feeding=feeding,
        attentional_units=units,
    )


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c)))
def test_teacher_forcing_equals_step_by_step(config):
    decoder = make(*config)
    out, align, final = decoder(X, MEMORY, memory_mask=MEMORY_MASK)
    states = decoder.get_initial_state(2)
    step_out, step_align = [], []
    for t in range(X.shape[1]):
        o, states, w = decoder.step(X[:, t], states, MEMORY, MEMORY_MASK)
        step_out.append(to_numpy(o))
        step_align.append(to_numpy(w))
    np.testing.assert_allclose(to_numpy(out), np.stack(step_out, 1), atol=1e-5)
    np.testing.assert_allclose(
        to_numpy(align), np.stack(step_align, 1), atol=1e-5
    )
    for a, b in zip(final, states, strict=True):
        np.testing.assert_allclose(to_numpy(a), to_numpy(b), atol=1e-5)


@pytest.mark.parametrize(
    "config", CONFIGS[:5], ids=lambda c: "-".join(map(str, c))
)
def test_padding_changes_nothing_valid(config):
    decoder = make(*config)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    padded_x = np.where(mask[..., None], X, 9.0).astype("float32")
    out, align, final = decoder(
        padded_x, MEMORY, inputs_mask=mask, memory_mask=MEMORY_MASK
    )
    short, short_align, short_final = decoder(
        X[:1, :3], MEMORY[:1], memory_mask=MEMORY_MASK[:1]
    )
    np.testing.assert_allclose(
        to_numpy(out)[:1, :3], to_numpy(short), atol=1e-5
    )
    np.testing.assert_allclose(
        to_numpy(align)[:1, :3], to_numpy(short_align), atol=1e-5
    )
    assert np.all(to_numpy(out)[0, 3:] == 0) and np.all(
        to_numpy(align)[0, 3:] == 0
    )
    for a, b in zip(final, short_final, strict=True):  # states stop at the end
        np.testing.assert_allclose(to_numpy(a)[:1], to_numpy(b), atol=1e-5)
    # More padded memory positions change nothing either.
    wide = np.concatenate([MEMORY, 5 * np.ones((2, 2, 6), "float32")], 1)
    wide_mask = np.concatenate([MEMORY_MASK, np.zeros((2, 2), bool)], 1)
    out2, align2, _ = decoder(
        padded_x, wide, inputs_mask=mask, memory_mask=wide_mask
    )
    np.testing.assert_allclose(to_numpy(out2), to_numpy(out), atol=1e-5)
    np.testing.assert_allclose(
        to_numpy(align2)[..., :3], to_numpy(align), atol=1e-5
    )


def test_padded_memory_gets_exactly_zero_gradient():
    decoder = make("gru", "additive", "bahdanau", True, 7)
    decoder(X, MEMORY, memory_mask=MEMORY_MASK)

    def loss(memory):
        out, _, _ = decoder(X, memory, memory_mask=MEMORY_MASK)
        return ops.sum(out**2)

    _, grads = gradients(loss, [MEMORY], [])
    g = to_numpy(grads[0])
    assert np.all(g[0, 2] == 0.0) and np.any(g[0, :2] != 0)


def test_keras_masks_are_read_from_embeddings(tmp_path):
    tokens = keras.Input((None,), dtype="int32")
    source = keras.Input((None,), dtype="int32")
    y = keras.layers.Embedding(10, 4, mask_zero=True)(tokens)
    memory = keras.layers.Embedding(10, 6, mask_zero=True)(source)
    out, align, _ = make("lstm", "general", "luong", True, 7)(y, memory)
    # The target mask flows on to the outputs and the alignments.
    assert getattr(out, "_keras_mask", None) is not None
    assert getattr(align, "_keras_mask", None) is not None
    model = keras.Model([tokens, source], [out, align])
    t = np.array([[3, 4, 0, 0], [5, 6, 7, 8]])
    s = np.array([[1, 2, 0], [3, 4, 5]])
    got_out, got_align = model.predict([t, s], verbose=0)
    assert np.all(got_align[0, :, 2] == 0) and np.all(got_out[0, 2:] == 0)
    assert np.all(got_align[0, 2:] == 0)
    assert_model_round_trips(model, [t, s], tmp_path, fresh_process=False)


@pytest.mark.slow
def test_config_round_trip_and_saved_file(tmp_path):
    decoder = make("gru", "low_rank", "bahdanau", True, 7)
    assert_config_round_trip(decoder)
    x = keras.Input((None, 4))
    m = keras.Input((None, 6))
    out, align, states = decoder(x, m)
    model = keras.Model([x, m], [out, align, states[0]])
    assert_model_round_trips(model, [X, MEMORY], tmp_path)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"attention_order": "before"}, "attention_order='before'"),
        ({"attentional_units": 0}, "attentional_units=0"),
        ({"score": "cosine"}, "score='cosine'"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AttentionDecoder(keras.layers.GRUCell(4), **kwargs)


def test_bad_cells_are_named():
    with pytest.raises(ValueError, match="cell.dropout=0.5"):
        AttentionDecoder(keras.layers.GRUCell(4, dropout=0.5))
    with pytest.raises(ValueError, match="cell="):
        AttentionDecoder(keras.layers.Dense(4))


def test_step_on_a_masked_embedding_warns_nothing():
    # A decoding step fed `Embedding(mask_zero=True)(tokens)` used to make
    # the cell warn that it "will destroy the mask information".
    import warnings

    embed = keras.layers.Embedding(10, 4, mask_zero=True)
    decoder = AttentionDecoder(keras.layers.GRUCell(6), score="general")
    memory = np.ones((2, 3, 6), "float32")
    states = decoder.get_initial_state(2)
    with warnings.catch_warnings(record=True) as logs:
        warnings.simplefilter("always")
        out, _, align = decoder.step(
            embed(np.array([2, 0])), states, memory, np.ones((2, 3), bool)
        )
    assert [str(w.message) for w in logs] == []
    assert tuple(out.shape)[0] == 2 and tuple(align.shape) == (2, 3)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c)))
def test_steps_on_memory_keys_equal_steps_without(config):
    """`memory_keys` once, then `step(keys=...)`: the numbers of steps
    that project the memory themselves; padded memory holding NaN reaches
    neither."""
    decoder = make(*config)
    decoder(X, MEMORY, memory_mask=MEMORY_MASK)  # built
    memory = np.where(MEMORY_MASK[..., None], MEMORY, np.nan).astype("float32")
    keys = decoder.memory_keys(memory, MEMORY_MASK)
    if config[1] in ("low_rank", "additive"):
        width = 3 if config[1] == "low_rank" else 6
        assert tuple(keys.shape) == (2, 3, width)
    else:
        assert keys is None  # nothing to project: nothing to save
    plain = decoder.get_initial_state(2)
    cached = decoder.get_initial_state(2)
    for t in range(X.shape[1]):
        o, plain, w = decoder.step(X[:, t], plain, memory, MEMORY_MASK)
        o2, cached, w2 = decoder.step(
            X[:, t], cached, memory, MEMORY_MASK, keys=keys
        )
        assert np.all(np.isfinite(to_numpy(o2)))
        np.testing.assert_allclose(to_numpy(o2), to_numpy(o), atol=1e-6)
        np.testing.assert_allclose(to_numpy(w2), to_numpy(w), atol=1e-6)


def test_memory_keys_of_several_mechanisms_and_their_errors():
    from keras_attn import Attention

    decoder = AttentionDecoder(
        keras.layers.GRUCell(6),
        mechanisms=[
            Attention(score="additive", units=5),
            Attention(score="general"),
        ],
    )
    memories = [MEMORY, MEMORY[..., :4]]
    masks = [MEMORY_MASK, np.ones((2, 3), bool)]
    decoder(X, memories, memory_mask=masks)
    keys = decoder.memory_keys(memories, masks)
    assert tuple(keys[0].shape) == (2, 3, 5) and keys[1] is None
    states = decoder.get_initial_state(2)
    o, _, w = decoder.step(X[:, 0], states, memories, masks)
    o2, _, w2 = decoder.step(X[:, 0], states, memories, masks, keys=keys)
    np.testing.assert_allclose(to_numpy(o2), to_numpy(o), atol=1e-6)
    # A score without a key projection takes no projected key.
    with pytest.raises(ValueError, match="projected_key.*general"):
        decoder.mechanisms[1](X[:, :1, :6], memories[1], projected_key=keys[0])
    monotonic = AttentionDecoder(
        keras.layers.GRUCell(6), score="additive", monotonic="parallel"
    )
    monotonic(X, MEMORY)
    assert monotonic.memory_keys(MEMORY) is None
    with pytest.raises(ValueError, match="keys with monotonic"):
        monotonic.step(
            X[:, 0], monotonic.get_initial_state(2, 3), MEMORY, keys=keys[0]
        )
