"""Tests for `StructuredSelfAttention` (Lin et al. 2017)."""

import keras
import numpy as np
import pytest

import keras_attn
from tests import layer_test_case as ltc
from tests.backend import gradients, to_numpy, training
from tests.references import np_structured_self_attention as np_reference

RNG = np.random.default_rng(1)


@pytest.mark.parametrize("coefficient", [0.0, 0.3, 1.0])
def test_matches_numpy_reference(coefficient):
    h = RNG.normal(size=(3, 6, 5)).astype("float32")
    mask = np.array([[1] * 6, [1, 1, 1, 0, 0, 0], [0] * 6], bool)
    layer = keras_attn.StructuredSelfAttention(
        units=7, num_hops=4, penalty_coefficient=coefficient
    )
    m, a = layer(h, mask=mask, return_attention_scores=True)
    want_a, want_m, want_p = np_reference(layer, h, mask)
    np.testing.assert_allclose(a, want_a, atol=1e-6)
    np.testing.assert_allclose(m, want_m, atol=1e-5)
    if coefficient == 0:
        assert layer.losses == []
    else:
        assert len(layer.losses) == 1
        np.testing.assert_allclose(
            layer.losses[0], coefficient * want_p, rtol=1e-5
        )
    assert np.all(to_numpy(a)[2] == 0) and np.all(to_numpy(m)[2] == 0)
    assert np.all(to_numpy(a)[1][:, 3:] == 0)


def test_padding_does_not_change_outputs():
    layer = keras_attn.StructuredSelfAttention(units=5, num_hops=3)
    h = RNG.normal(size=(2, 4, 3)).astype("float32")
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)
    m = layer(h, mask=mask)
    p = layer.losses[0]
    h2 = np.concatenate([h, 9 * np.ones((2, 3, 3), "float32")], axis=1)
    mask2 = np.concatenate([mask, np.zeros((2, 3), bool)], axis=1)
    np.testing.assert_allclose(layer(h2, mask=mask2), m, atol=1e-6)
    np.testing.assert_allclose(layer.losses[0], p, rtol=1e-6)


def test_implicit_mask_from_embedding():
    tokens = np.array([[4, 5, 6, 0, 0], [7, 8, 0, 0, 0]])
    inp = keras.Input((None,), dtype="int32")
    emb = keras.layers.Embedding(10, 4, mask_zero=True)
    layer = keras_attn.StructuredSelfAttention(units=5, num_hops=2)
    m, a = layer(emb(inp), return_attention_scores=True)
    assert m.shape == (None, 2, 4) and a.shape == (None, 2, None)
    model = keras.Model(inp, [m, a])
    got_m, got_a = model(tokens)
    want_m, want_a = layer(
        keras.ops.convert_to_numpy(emb(tokens)),
        mask=tokens > 0,
        return_attention_scores=True,
    )
    np.testing.assert_allclose(got_m, want_m, atol=1e-6)
    np.testing.assert_allclose(got_a, want_a, atol=1e-6)
    pad = np.broadcast_to(tokens[:, None, :] == 0, got_a.shape)
    assert np.all(to_numpy(got_a)[pad] == 0)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_fully_masked_and_half_precision(dtype):
    layer = keras_attn.StructuredSelfAttention(4, 3, dtype=dtype)
    h = RNG.normal(size=(2, 5, 3)).astype("float32") * 30
    mask = np.array([[0] * 5, [1, 1, 0, 0, 0]], bool)
    m = to_numpy(keras.ops.cast(layer(h, mask=mask), "float32"))
    assert np.all(m[0] == 0) and np.all(np.isfinite(m))
    assert np.isfinite(float(layer.losses[0]))

    def loss(ht):
        out = keras.ops.sum(keras.ops.cast(layer(ht, mask=mask), "float32"))
        return out + layer.losses[0]

    _, grads = gradients(loss, [h], layer.trainable_weights)
    for g in grads:
        assert np.all(np.isfinite(to_numpy(g, "float32")))
    g_h = to_numpy(grads[0])
    assert np.all(g_h[1, 2:] == 0)  # padded steps get no gradient


def test_every_weight_gets_a_finite_gradient():
    layer = keras_attn.StructuredSelfAttention(6, 3, use_bias=True)
    h = RNG.normal(size=(2, 5, 4)).astype("float32")
    ltc.assert_finite_gradients(layer, lambda: layer(h))


@pytest.mark.slow
def test_penalty_pushes_hops_apart():
    """Training on the penalty alone lowers it (the paper's intent)."""
    h = RNG.normal(size=(8, 10, 6)).astype("float32")
    inp = keras.Input((10, 6))
    m = keras_attn.StructuredSelfAttention(8, 4)(inp)
    model = keras.Model(inp, keras.layers.Flatten()(m))
    model.compile(keras.optimizers.Adam(5e-2), loss=lambda y, p: 0.0 * p)
    start = model.evaluate(h, np.zeros((8, 24)), verbose=0)
    with training():
        model.fit(h, np.zeros((8, 24)), epochs=60, batch_size=8, verbose=0)
    assert model.evaluate(h, np.zeros((8, 24)), verbose=0) < 0.5 * start


@pytest.mark.slow
def test_model_trains_and_round_trips(tmp_path):
    """Classify whether token 3 occurs anywhere in a padded sequence."""
    tokens = RNG.integers(4, 20, size=(128, 9))
    tokens[:, 7:] = 0
    y = RNG.integers(0, 2, size=128).astype("float32")
    pos = RNG.integers(0, 7, size=128)
    tokens[np.arange(128)[y == 1], pos[y == 1]] = 3
    inp = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(20, 8, mask_zero=True)(inp)
    m = keras_attn.StructuredSelfAttention(
        8, 2, penalty_coefficient=0.1, dropout=0.1
    )(x)
    out = keras.layers.Dense(1, "sigmoid")(keras.layers.Flatten()(m))
    model = keras.Model(inp, out)
    ltc.assert_trains(model, tokens, y, steps=40, loss="binary_crossentropy")
    ltc.assert_model_round_trips(model, tokens, tmp_path)


def test_config_round_trip():
    ltc.assert_config_round_trip(
        keras_attn.StructuredSelfAttention(
            12,
            3,
            penalty_coefficient=0.5,
            dropout=0.1,
            kernel_regularizer="l2",
        )
    )


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"num_hops": 0}, "num_hops=0"),
        ({"units": 2.5}, "units=2.5"),
        ({"penalty_coefficient": -1}, "penalty_coefficient=-1"),
        # accepted by 0.2.0: nan made the penalty vanish, inf infinite
        ({"penalty_coefficient": float("nan")}, "penalty_coefficient=nan"),
        ({"penalty_coefficient": float("inf")}, "penalty_coefficient=inf"),
        ({"dropout": -0.1}, "dropout=-0.1"),
    ],
)
def test_invalid_arguments(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        keras_attn.StructuredSelfAttention(**kwargs)


def test_invalid_input_rank():
    with pytest.raises(ValueError, match="rank 3"):
        keras_attn.StructuredSelfAttention(4, 2)(np.ones((2, 3), "float32"))
