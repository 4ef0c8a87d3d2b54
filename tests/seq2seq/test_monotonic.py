"""Monotonic attention (Raffel et al. 2017; tfa's `monotonic_attention`,
`BahdanauMonotonicAttention`, `LuongMonotonicAttention`) against NumPy
transcriptions of the paper's recursion; part of the JAX and PyTorch
suite."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.seq2seq import MonotonicAttention, monotonic_attention
from keras_attn.seq2seq.monotonic import initial_alignment

RNG = np.random.default_rng(5)


def np_monotonic(p, previous):
    """q_j = (1 - p_{j-1}) q_{j-1} + previous_j, alpha_j = p_j q_j."""
    out = np.zeros_like(p)
    for b in range(p.shape[0]):
        q = 0.0
        for j in range(p.shape[1]):
            q = (1 - p[b, j - 1]) * q + previous[b, j] if j else previous[b, 0]
            out[b, j] = p[b, j] * q
    return out


def distributions(b, s, one_hot=False):
    if one_hot:
        return np.eye(s, dtype="float32")[RNG.integers(0, s, b)]
    a = RNG.dirichlet(np.ones(s), size=b).astype("float32")
    return a * RNG.uniform(0.5, 1.0, (b, 1)).astype("float32")  # mass < 1


@pytest.mark.parametrize("mode", ["recursive", "parallel"])
@pytest.mark.parametrize("one_hot", [False, True])
def test_soft_modes_follow_the_recursion(mode, one_hot):
    p = RNG.uniform(0.05, 0.95, (6, 9)).astype("float32")
    previous = distributions(6, 9, one_hot)
    got = ops.convert_to_numpy(monotonic_attention(p, previous, mode))
    np.testing.assert_allclose(got, np_monotonic(p, previous), atol=2e-6)
    assert (got.sum(-1) <= previous.sum(-1) + 1e-5).all()  # mass only lost


def test_hard_mode_stops_at_the_first_chosen_position_on_or_after():
    p = (RNG.uniform(size=(50, 8)) < 0.3).astype("float32")
    previous = distributions(50, 8, one_hot=True)
    hard = ops.convert_to_numpy(monotonic_attention(p, previous, "hard"))
    np.testing.assert_array_equal(hard, np_monotonic(p, previous))
    for b in range(50):
        start = int(previous[b].argmax())
        chosen = [j for j in range(start, 8) if p[b, j] == 1]
        expected = np.eye(8)[chosen[0]] if chosen else np.zeros(8)
        np.testing.assert_array_equal(hard[b], expected)


def test_a_long_run_of_small_stops_leaves_mass_far_right():
    # 400 positions of p = 0.001: the exclusive product stays positive
    p = np.full((1, 400), 1e-3, "float32")
    previous = distributions(1, 400, one_hot=True) * 0 + np.eye(400)[0]
    got = ops.convert_to_numpy(monotonic_attention(p, previous, "parallel"))
    np.testing.assert_allclose(
        got, np_monotonic(p.astype("float64"), previous), rtol=1e-4
    )


def np_additive(layer, query, memory):
    w = {
        v.path.split("/", 1)[1]: ops.convert_to_numpy(v) for v in layer.weights
    }
    hidden = np.tanh(
        (query @ w["query/kernel"])[:, None]
        + memory @ w["key/kernel"]
        + w["bias"]
    )
    return hidden @ w["score_kernel"] + w["score_bias"]


def np_general(layer, query, memory):
    w = {
        v.path.split("/", 1)[1]: ops.convert_to_numpy(v) for v in layer.weights
    }
    scores = np.einsum("bu,bsu->bs", query @ w["query/kernel"], memory)
    return scores * w["scale"] + w["score_bias"]


@pytest.mark.parametrize("mode", ["parallel", "recursive", "hard"])
@pytest.mark.parametrize(
    "kwargs, reference",
    [
        ({"score": "additive", "units": 5}, np_additive),  # Bahdanau
        ({"score": "general", "use_scale": True}, np_general),  # Luong
    ],
)
def test_layer_equals_a_numpy_transcription(mode, kwargs, reference):
    # Seeded: "parallel" is inexact where p is within ~1e-10 of 1 (its
    # documented limit, as tfa's), which unseeded weights could reach.
    keras.utils.set_random_seed(7)
    rng = np.random.default_rng(7)
    layer = MonotonicAttention(mode=mode, score_bias_init=-0.5, **kwargs)
    query = rng.normal(size=(4, 3)).astype("float32")
    memory = rng.normal(size=(4, 7, 6)).astype("float32")
    mask = np.arange(7)[None] < np.array([[7], [5], [3], [6]])
    previous = ops.convert_to_numpy(initial_alignment(4, 7))
    steps = []
    for _ in range(4):  # a few decoder steps, each from the last
        context, alignment = layer(query, memory, previous, memory_mask=mask)
        scores = reference(layer, query, memory)
        p = (
            (scores > 0).astype("float32")
            if mode == "hard"
            else 1 / (1 + np.exp(-scores))
        )
        expected = np_monotonic(np.where(mask, p, 0.0), previous)
        got = ops.convert_to_numpy(alignment)
        np.testing.assert_allclose(got, expected, atol=2e-6)
        np.testing.assert_allclose(
            ops.convert_to_numpy(context),
            np.einsum("bs,bsd->bd", expected, memory),
            atol=2e-5,
        )
        assert not got[~mask].any()  # padding never attended
        steps.append(got)
        previous = got
        query = rng.normal(size=(4, 3)).astype("float32")
    assert float(ops.convert_to_numpy(layer.score_bias)) == -0.5
    if mode == "hard":  # one position or none; never moves left
        for b in range(4):
            at = [int(s[b].argmax()) for s in steps if s[b].any()]
            assert at == sorted(at)


def test_noise_only_while_training():
    layer = MonotonicAttention(units=4, sigmoid_noise=1.0, seed=3)
    args = (
        RNG.normal(size=(2, 3)).astype("float32"),
        RNG.normal(size=(2, 6, 5)).astype("float32"),
        ops.convert_to_numpy(initial_alignment(2, 6)),
    )
    quiet = [ops.convert_to_numpy(layer(*args)[1]) for _ in range(2)]
    noisy = ops.convert_to_numpy(layer(*args, training=True)[1])
    np.testing.assert_array_equal(quiet[0], quiet[1])
    assert np.abs(noisy - quiet[0]).max() > 1e-3


def test_keras_file_round_trip(tmp_path):
    query = keras.Input((3,))
    memory = keras.Input((6, 5))
    previous = keras.Input((6,))
    layer = MonotonicAttention(
        mode="recursive", score="general", use_scale=True, score_bias_init=1.0
    )
    context, alignment = layer(query, memory, previous)
    model = keras.Model([query, memory, previous], [context, alignment])
    x = [
        RNG.normal(size=(2, 3)).astype("float32"),
        RNG.normal(size=(2, 6, 5)).astype("float32"),
        ops.convert_to_numpy(initial_alignment(2, 6)),
    ]
    path = str(tmp_path / "m.keras")
    model.save(path)
    again = keras.models.load_model(path)
    assert again.layers[-1].get_config()["mode"] == "recursive"
    for a, b in zip(
        model.predict(x, verbose=0), again.predict(x, verbose=0), strict=True
    ):
        np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda: MonotonicAttention(mode="soft"), "mode='soft'"),
        (lambda: MonotonicAttention(sigmoid_noise=-1), "sigmoid_noise=-1"),
        (lambda: MonotonicAttention(units=3, dropout=0.1), "dropout=0.1"),
        (lambda: monotonic_attention(np.ones((1, 2)), np.ones((1, 2)), "x"),
         "mode='x'"),
    ],
)  # fmt: skip
def test_bad_arguments_are_named(make, name):
    with pytest.raises(ValueError, match=name):
        make()


# AttentionDecoder(monotonic=...): the decoder's loop around the layer.


def _decoder(order, mode, feeding=False):
    from keras_attn.seq2seq import AttentionDecoder

    keras.utils.set_random_seed(3)
    return AttentionDecoder(
        keras.layers.GRUCell(6),
        score="additive",
        units=5,
        attention_order=order,
        monotonic=mode,
        input_feeding=feeding,
        attentional_units=4 if feeding else None,
        score_bias_init=0.5,
    )


def _by_hand(decoder, x, memory, mask, inputs_mask):
    """The loop written out: cell and attention called by hand, the last
    alignment fed to the next step, padded steps keeping the states."""
    cell, attend = decoder.cell, decoder.attention
    b, t = x.shape[:2]
    h = np.zeros((b, 6), "float32")
    fed = np.zeros((b, decoder.output_size), "float32")
    previous = ops.convert_to_numpy(initial_alignment(b, memory.shape[1]))
    outs, aligns = [], []
    for i in range(t):
        pieces = [x[:, i]] + ([fed] if decoder.input_feeding else [])
        if decoder.attention_order == "bahdanau":
            context, a = attend(h, memory, previous, memory_mask=mask)
            pieces.append(ops.convert_to_numpy(context))
        out, new = cell(np.concatenate(pieces, -1), [h])
        out, new = ops.convert_to_numpy(out), ops.convert_to_numpy(new[0])
        if decoder.attention_order == "luong":
            context, a = attend(out, memory, previous, memory_mask=mask)
        joined = np.concatenate([ops.convert_to_numpy(context), out], -1)
        if decoder.attentional_layer is not None:
            joined = ops.convert_to_numpy(decoder.attentional_layer(joined))
        a = ops.convert_to_numpy(a)
        on = inputs_mask[:, i : i + 1]
        h = np.where(on, new, h)
        fed = np.where(on, joined, fed)
        previous = np.where(on, a, previous)
        outs.append(np.where(on, joined, 0))
        aligns.append(np.where(on, a, 0))
    return np.stack(outs, 1), np.stack(aligns, 1), previous


@pytest.mark.parametrize(
    "order, mode, feeding",
    [
        ("luong", "parallel", False),
        ("bahdanau", "recursive", False),
        ("luong", "hard", True),
    ],
)
def test_decoder_carries_the_alignment_step_to_step(order, mode, feeding):
    decoder = _decoder(order, mode, feeding)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 5, 4)).astype("float32")
    memory = rng.normal(size=(3, 7, 8)).astype("float32")
    mask = np.arange(7)[None] < np.array([[7], [4], [6]])
    inputs_mask = np.arange(5)[None] < np.array([[5], [3], [4]])
    out, align, states = decoder(
        x, memory, memory_mask=mask, inputs_mask=inputs_mask
    )
    ref_out, ref_align, last = _by_hand(decoder, x, memory, mask, inputs_mask)
    np.testing.assert_allclose(ops.convert_to_numpy(out), ref_out, atol=2e-5)
    np.testing.assert_allclose(
        ops.convert_to_numpy(align), ref_align, atol=2e-6
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(states[-1]), last, atol=2e-6
    )
    # `step` from the initial state, one token at a time: the same numbers
    state = decoder.get_initial_state(3, memory_length=7)
    assert len(state) == 1 + feeding + 1
    for i in range(3):  # all rows are real for the first 3 steps
        y, state, a = decoder.step(x[:, i], state, memory, mask)
        np.testing.assert_allclose(
            ops.convert_to_numpy(a), ref_align[:, i], atol=2e-6
        )
    if mode == "hard":  # one position at a time, never moving left
        picks = ref_align.argmax(-1)[ref_align.max(-1) > 0]
        assert set(np.unique(ref_align)) <= {0.0, 1.0} and len(picks)


def test_decoder_with_monotonic_attention_round_trips(tmp_path):
    decoder = _decoder("luong", "recursive")
    x, memory = keras.Input((None, 4)), keras.Input((7, 8))
    out, align, _ = decoder(x, memory)
    model = keras.Model([x, memory], [out, align])
    rng = np.random.default_rng(2)
    data = [
        rng.normal(size=(2, 5, 4)).astype("float32"),
        rng.normal(size=(2, 7, 8)).astype("float32"),
    ]
    path = str(tmp_path / "d.keras")
    model.save(path)
    again = keras.models.load_model(path)
    layer = [la for la in again.layers if hasattr(la, "monotonic")][0]
    assert layer.monotonic == "recursive"
    assert float(ops.convert_to_numpy(layer.attention.score_bias)) == 0.5
    for a, b in zip(
        model.predict(data, verbose=0),
        again.predict(data, verbose=0),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, atol=1e-6)
