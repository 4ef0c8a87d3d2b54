"""Tests for the position encodings (pure functions and layers)."""

import numpy as np
import pytest

import keras_attn
from keras_attn.ops import positional
from tests import layer_test_case as ltc
from tests.references import np_sinusoidal


def test_sinusoidal_function_matches_formula():
    pos = np.array([0, 1, 5, 77, 1000])
    got = positional.sinusoidal_encoding(pos, 10)
    np.testing.assert_allclose(got, np_sinusoidal(pos, 10), atol=2e-5)


@pytest.mark.parametrize("start", [0, 3])
def test_sinusoidal_layer_any_length_and_offset(start):
    layer = keras_attn.SinusoidalPositionEncoding()
    x = np.zeros((2, 300, 6), "float32")  # longer than anything "trained"
    got = layer(x, start_index=start)
    want = np_sinusoidal(np.arange(start, start + 300), 6)
    np.testing.assert_allclose(got[1], want, atol=1e-4)
    assert got.shape == x.shape
    ltc.assert_config_round_trip(layer)


def test_learned_lookup_offset_and_length_error():
    layer = keras_attn.LearnedPositionEmbedding(max_length=8)
    x = np.zeros((2, 5, 3), "float32")
    table = None
    out = layer(x, start_index=2)
    table = layer.embeddings.numpy()
    np.testing.assert_array_equal(out[0], table[2:7])
    with pytest.raises(ValueError, match="max_length=8"):
        layer(np.zeros((2, 9, 3), "float32"))
    with pytest.raises(ValueError, match="start_index=5"):
        layer(x, start_index=5)
    with pytest.raises(ValueError, match="max_length=0"):
        keras_attn.LearnedPositionEmbedding(max_length=0)
    ltc.assert_config_round_trip(layer)
