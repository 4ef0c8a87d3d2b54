"""Three bugs found by running Keras's own attention tests on our layers.
Each test failed on 0.1 (silently wrong numbers on JAX, a kernel error on
TensorFlow, a `TypeError`, a lost mask)."""

import keras
import numpy as np
import pytest

import keras_attn
from tests.backend import to_numpy

RNG = np.random.default_rng(4)
Q = RNG.normal(size=(2, 3, 4)).astype("float32")
V = RNG.normal(size=(2, 5, 4)).astype("float32")
K1 = RNG.normal(size=(2, 1, 4)).astype("float32")

LAYERS = {
    "dot": lambda: keras_attn.Attention(),
    "additive": lambda: keras_attn.AdditiveAttention(4),
    "mhp": lambda: keras_attn.MultiHeadPositional(2, 2, position=None),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_key_and_value_of_different_lengths_are_refused(name):
    layer = LAYERS[name]()
    with pytest.raises(
        ValueError, match=r"value_shape=\(2, 5, 4\).*key_shape=\(2, 1, 4\)"
    ):
        layer(Q, V, key=K1)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_symbolic_key_and_value_of_different_lengths_are_refused(name):
    q, v, k = keras.Input((3, 4)), keras.Input((5, 4)), keras.Input((1, 4))
    with pytest.raises(ValueError, match="except the last one"):
        LAYERS[name]()(q, v, key=k)


def test_compute_output_shape_takes_key_shape_positionally():
    layer = keras_attn.MultiHeadPositional(2, 2, position=None)
    assert layer.compute_output_shape((2, 3, 4), (2, 5, 4), (2, 5, 4)) == (
        2,
        3,
        4,
    )
    with pytest.raises(ValueError, match="except the last one"):
        layer.compute_output_shape((2, 3, 4), (2, 5, 4), (2, 6, 4))
    attention = keras_attn.Attention()
    with pytest.raises(ValueError, match="except the last one"):
        attention.compute_output_shape((2, 3, 4), (2, 5, 4), (2, 6, 4))


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_an_explicit_query_mask_is_the_outputs_mask(name):
    q, v = keras.Input((3, 4)), keras.Input((5, 4))
    qm = keras.Input((3,), dtype="bool")
    out = LAYERS[name]()(q, v, query_mask=qm)
    mask = getattr(out, "_keras_mask", None)
    assert mask is not None and tuple(mask.shape) == (None, 3)
    if keras.backend.backend() == "tensorflow":  # eager tensors carry it too
        eager_qm = np.array([[1, 1, 0], [1, 0, 0]], bool)
        eager = LAYERS[name]()(Q, V, query_mask=eager_qm)
        np.testing.assert_array_equal(to_numpy(eager._keras_mask), eager_qm)
