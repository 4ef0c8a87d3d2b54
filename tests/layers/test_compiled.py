"""`MultiHeadPositional` compiled, over every constructor option: a
functional model with unknown length, masks from an `Embedding`, run by
`predict` under `tf.function` with XLA or `jax.jit` (PyTorch runs it
eagerly), gives what the eager call gives, at two lengths, and trains a
step to finite weights. Part of the JAX and PyTorch suite."""

import keras
import numpy as np
import pytest

from keras_attn import MultiHeadPositional
from tests import backend
from tests.layer_models import OPTIONS

pytestmark = pytest.mark.slow  # a minute a backend: XLA compiles

RNG = np.random.default_rng(3)


def tokens(length):
    ids = RNG.integers(1, 20, size=(3, length))
    ids[1, length - 2 :] = 0  # padding, masked by the Embedding
    return ids.astype("int32")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_compiled_equals_eager_over_unknown_lengths(options, causal):
    keras.utils.set_random_seed(1)
    ids = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(20, 16, mask_zero=True)(ids)
    y = MultiHeadPositional(num_heads=4, key_dim=8, **options)(
        x, use_causal_mask=causal
    )
    model = keras.Model(ids, keras.layers.Dense(1)(y))
    model.compile("sgd", "mse", jit_compile=keras.backend.backend() != "torch")
    for length in (5, 7):
        batch = tokens(length)
        eager = keras.ops.convert_to_numpy(model(batch))
        compiled = model.predict(batch, verbose=0)
        assert compiled.shape == (3, length, 1)
        np.testing.assert_allclose(compiled, eager, rtol=1e-5, atol=1e-5)
    with backend.training():
        model.fit(tokens(6), np.ones((3, 6, 1)), epochs=1, verbose=0)
    assert all(
        np.isfinite(keras.ops.convert_to_numpy(w)).all() for w in model.weights
    )
