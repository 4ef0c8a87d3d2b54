"""`RotaryEmbedding` and `AlibiBias` as layers of their own: against the
formulas (NumPy references in `test_positions_heads`), serialization, and
`MultiHeadPositional` using them. Backend-agnostic."""

import keras
import numpy as np
import pytest

from keras_attn import layers as attn_layers
from keras_attn.layers import AlibiBias, MultiHeadPositional, RotaryEmbedding
from tests.references import np_rotary, np_slopes


def to_np(x):
    return keras.ops.convert_to_numpy(x)


@pytest.mark.parametrize("start", [0, 3])
def test_rotary_layer_matches_the_formula_on_heads(start):
    x = np.random.default_rng(0).normal(size=(2, 5, 3, 6)).astype("float32")
    layer = RotaryEmbedding(max_wavelength=500.0, scaling_factor=2.0)
    got = to_np(layer(x, start_index=start))
    want = np_rotary(x, range(start, start + 5), 500.0, 2.0)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_rotary_layer_on_three_d_inputs_and_another_sequence_axis():
    x = np.random.default_rng(1).normal(size=(2, 5, 6)).astype("float32")
    got = to_np(RotaryEmbedding()(x))
    want = np_rotary(x[:, :, None, :], range(5))[:, :, 0, :]
    np.testing.assert_allclose(got, want, atol=1e-5)
    heads_first = np.transpose(x[:, :, None, :], (0, 2, 1, 3))  # (B, 1, T, K)
    turned = to_np(RotaryEmbedding(sequence_axis=2)(heads_first))
    np.testing.assert_allclose(turned[:, 0], want, atol=1e-5)


def test_rotary_scores_depend_on_the_distance_only():
    rng = np.random.default_rng(2)
    q, k = rng.normal(size=(2, 1, 1, 8)).astype("float32")
    layer = RotaryEmbedding()
    dots = [
        float(
            np.sum(
                to_np(layer(q, start_index=p + 4))
                * to_np(layer(k, start_index=p))
            )
        )
        for p in (0, 7, 31)
    ]
    np.testing.assert_allclose(dots, dots[0], rtol=1e-4)


@pytest.mark.parametrize(
    "shape, needle",
    [((2, 5, 3, 5), "even"), ((2, 5), "even")],
)
def test_rotary_refuses_odd_features_naming_the_shape(shape, needle):
    with pytest.raises(ValueError, match=f"{needle}.*inputs.shape"):
        RotaryEmbedding()(np.zeros(shape, "float32"))


@pytest.mark.parametrize("name", ["max_wavelength", "scaling_factor"])
def test_rotary_bad_arguments_are_named(name):
    with pytest.raises(ValueError, match=f"{name}=-1"):
        RotaryEmbedding(**{name: -1})


@pytest.mark.parametrize("heads", [2, 3, 8])
def test_alibi_layer_adds_the_papers_bias(heads):
    scores = np.random.default_rng(3).normal(size=(2, heads, 4, 6))
    scores = scores.astype("float32")
    got = to_np(AlibiBias()(scores))
    i = np.arange(2, 6)[:, None]  # the last 4 of 6 positions
    j = np.arange(6)[None, :]
    slopes = np.array(np_slopes(heads))[:, None, None]
    np.testing.assert_allclose(
        got, scores - slopes * np.abs(i - j)[None], atol=1e-6
    )
    at_zero = to_np(AlibiBias()(scores, start_index=0))
    np.testing.assert_allclose(
        at_zero, scores - slopes * np.abs(i - 2 - j)[None], atol=1e-6
    )


def test_alibi_refuses_scores_of_another_rank():
    with pytest.raises(ValueError, match="attention_scores.shape=\\(2, 3\\)"):
        AlibiBias()(np.zeros((2, 3), "float32"))


@pytest.mark.parametrize(
    "layer",
    [RotaryEmbedding(300.0, 4.0, sequence_axis=2), AlibiBias()],
    ids=["rotary", "alibi"],
)
def test_position_layers_round_trip(layer, tmp_path):
    x = np.random.default_rng(4).normal(size=(1, 2, 4, 4)).astype("float32")
    inp = keras.Input((2, 4, 4))
    model = keras.Model(inp, layer(inp))
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(to_np(loaded(x)), to_np(model(x)), atol=1e-6)
    assert type(loaded.layers[-1]) is type(layer)
    assert loaded.layers[-1].get_config() == layer.get_config()


@pytest.mark.parametrize("position", ["rotary", "alibi"])
def test_multi_head_positional_uses_the_public_layers(position):
    layer = MultiHeadPositional(2, 4, position=position)
    x = np.random.default_rng(5).normal(size=(2, 5, 8)).astype("float32")
    layer(x)
    own = layer.rotary if position == "rotary" else layer.alibi
    assert isinstance(own, (RotaryEmbedding, AlibiBias))
    assert "RotaryEmbedding" in attn_layers.__all__
    assert "AlibiBias" in attn_layers.__all__
