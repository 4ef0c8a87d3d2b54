"""`AttentionDecoder` in tfa's form: weights arranged as
`tfa.seq2seq.AttentionWrapper`'s reproduce its outputs.

The reference is tfa's `AttentionWrapper.call` written in NumPy from its
definition (cell input `[x_t; attention_{t−1}]`, the cell, the mechanism
queried with the cell output, `attention = W [cell_output; context]`
with tfa's bias-free `attention_layer_size` layer), with tfa's
`LuongAttention` (`score = q · (M h)`, `scale` a learned `g`) and
`BahdanauAttention` (`v · tanh(W₁ h + W₂ q)`; with `normalize`,
`g v/‖v‖ · tanh(W₁ h + W₂ q + b)`). Part of the JAX and PyTorch suite."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.seq2seq import AttentionDecoder

B, T, S, E, U, D, N = 2, 4, 5, 3, 6, 7, 4
RNG = np.random.default_rng(0)
INPUTS = RNG.normal(size=(B, T, E)).astype("float32")
MEMORY = RNG.normal(size=(B, S, D)).astype("float32")
MASK = np.ones((B, S), bool)
MASK[1, 3:] = False


def weights_of(layer):
    return {
        v.path.split("/", 1)[1]: v.numpy().astype("float64")
        for v in layer.weights
    }


def tfa_reference(decoder, kind, scale=False, normalize=False):
    w = weights_of(decoder)
    cell_k, cell_r, cell_b = (
        w["cell/kernel"],
        w["cell/recurrent_kernel"],
        w["cell/bias"],
    )
    # tfa's attention layer kernel: [cell rows; context rows] (ours is
    # [context rows; cell rows]).
    ours = w["attentional/kernel"]  # (D + U, N)
    tfa_attention_kernel = np.concatenate([ours[D:], ours[:D]], axis=0)
    h = np.zeros((B, U))
    attention = np.zeros((B, N))
    outputs = []
    for t in range(T):
        x = np.concatenate([INPUTS[:, t], attention], axis=1)
        h = np.tanh(x @ cell_k + h @ cell_r + cell_b)  # SimpleRNNCell
        if kind == "luong":  # tfa: keys = memory_layer(memory) = h M
            memory_kernel = w["attention/query/kernel"].T  # (D, U)
            keys = MEMORY @ memory_kernel
            score = np.einsum("bu,bsu->bs", h, keys)
            if scale:
                score = score * w["attention/scale"]
        else:
            keys = MEMORY @ w["attention/key/kernel"]
            q = h @ w["attention/query/kernel"]
            v = w["attention/score_kernel"]
            inner = keys + q[:, None]
            if normalize:
                v = w["attention/norm_scale"] * v / np.linalg.norm(v)
                inner = inner + w["attention/bias"]
            score = np.tanh(inner) @ v
        score = np.where(MASK, score, -np.inf)
        align = np.exp(score - score.max(1, keepdims=True))
        align /= align.sum(1, keepdims=True)
        context = np.einsum("bs,bsd->bd", align, MEMORY)
        attention = np.concatenate([h, context], axis=1) @ tfa_attention_kernel
        outputs.append(attention)
    return np.stack(outputs, axis=1)


@pytest.mark.parametrize(
    "kind, scale, normalize",
    [
        ("luong", False, False),
        ("luong", True, False),
        ("bahdanau", False, False),
        ("bahdanau", False, True),
    ],
)
def test_tfa_form_reproduces_attention_wrapper(kind, scale, normalize):
    keras.utils.set_random_seed(1)
    decoder = AttentionDecoder(
        keras.layers.SimpleRNNCell(U, name="cell"),
        score="general" if kind == "luong" else "additive",
        units=5 if kind == "bahdanau" else None,
        attentional_units=N,
        attentional_activation=None,
        attentional_use_bias=False,
        input_feeding=True,
        use_scale=scale,
        normalize=normalize,
        attention_use_bias=normalize,  # tfa's Bahdanau: b with normalize
    )
    out, _, _ = decoder(INPUTS, MEMORY, memory_mask=MASK)
    if scale:  # move off the initial value, so that it is exercised
        decoder.attention.scale.assign(1.7)
        out, _, _ = decoder(INPUTS, MEMORY, memory_mask=MASK)
    want = tfa_reference(decoder, kind, scale, normalize)
    np.testing.assert_allclose(ops.convert_to_numpy(out), want, atol=2e-5)


def test_attention_layer_argument_and_round_trip(tmp_path):
    decoder = AttentionDecoder(
        keras.layers.GRUCell(U),
        score="dot",
        attention_layer=keras.layers.Dense(5, use_bias=False, name="mine"),
        input_feeding=True,
    )
    inputs = keras.Input((None, E))
    memory = keras.Input((None, U))
    out, align, _ = decoder(inputs, memory)
    assert out.shape[-1] == 5
    model = keras.Model([inputs, memory], out)
    memory_values = RNG.normal(size=(B, S, U)).astype("float32")
    want = ops.convert_to_numpy(model([INPUTS, memory_values]))
    path = str(tmp_path / "decoder.keras")
    model.save(path)
    again = keras.saving.load_model(path)
    got = ops.convert_to_numpy(again([INPUTS, memory_values]))
    np.testing.assert_allclose(got, want, atol=1e-6)
    config = again.layers[-1].get_config()
    assert config["attention_layer"]["config"]["name"] == "mine"


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (
            {"attentional_units": 3, "attention_layer": keras.layers.Dense(2)},
            "without attentional_units",
        ),
        ({"attention_layer": "dense"}, "attention_layer='dense'"),
        ({"score": "general", "normalize": True}, "normalize"),
    ],
)
def test_bad_arguments_are_named(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        AttentionDecoder(keras.layers.GRUCell(U), **kwargs)
