"""Every sub-layer of `MultiHeadPositional` starts from its own draw.

Keras copies a seedless initializer once per sub-layer
(`_get_common_kwargs_for_sublayer`), because one copy fixes its seed and
hands equal values to every weight of one shape. A layer that passes one
copy to two projections starts them equal (or, for other shapes, with
proportional values from the same random stream), and gradient descent
keeps them that way. The check below is that no two weights of a layer
share the start of their random stream: it holds for Keras's
`MultiHeadAttention` and `GroupQueryAttention`, and must hold for ours over
every constructor option. Part of the JAX and PyTorch suite.
"""

import itertools

import keras
import numpy as np
import pytest

from keras_attn import MultiHeadPositional
from tests.layer_models import OPTIONS  # noqa: F401

QUERY = np.ones((2, 5, 16), "float32")
VALUE = np.ones((2, 7, 12), "float32")


def drawn_together(layer):
    """The pairs of random weights (kernels, tables) of a built layer
    whose first values are equal or proportional: one random stream."""
    kernels = {
        w.path: keras.ops.convert_to_numpy(w).ravel() for w in layer.weights
    }
    # Drawn, not constant (biases start at zeros).
    kernels = {k: v for k, v in kernels.items() if v.size > 1 and v.std()}
    shared = []
    for (a, x), (b, y) in itertools.combinations(kernels.items(), 2):
        n = min(x.size, y.size, 64)
        r = np.corrcoef(x[:n], y[:n])[0, 1]
        if abs(r) > 0.99:
            shared.append((a, b))
    return kernels, shared


def test_the_check_passes_keras_layers_and_catches_a_shared_initializer():
    mha = keras.layers.MultiHeadAttention(4, 8, use_gate=True)
    mha.build(QUERY.shape, QUERY.shape)
    gqa = keras.layers.GroupQueryAttention(8, 4, 2, use_gate=True)
    gqa.build(QUERY.shape, QUERY.shape)
    for layer in (mha, gqa):
        kernels, shared = drawn_together(layer)
        assert len(kernels) >= 5 and not shared, (layer.name, shared)
    # Keras's own layers, given one seeded initializer, share it.
    seeded = keras.layers.MultiHeadAttention(
        4, 8, kernel_initializer=keras.initializers.GlorotUniform(seed=1)
    )
    seeded.build(QUERY.shape, QUERY.shape)
    assert drawn_together(seeded)[1]


@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_no_two_sublayers_start_equal(options, cross):
    layer = MultiHeadPositional(num_heads=4, key_dim=8, **options)
    layer(QUERY, VALUE) if cross else layer(QUERY)
    kernels, shared = drawn_together(layer)
    assert len(kernels) >= 4, kernels.keys()
    assert not shared, shared


def test_grouped_projections_differ_as_in_keras_group_query_attention():
    """The reported case: `_key_dense` and `_value_dense` of equal shape."""
    ours = MultiHeadPositional(
        num_heads=4, key_dim=8, num_key_value_heads=2, position=None
    )
    ours.build(QUERY.shape)
    theirs = keras.layers.GroupQueryAttention(8, 4, 2)
    theirs.build(QUERY.shape, QUERY.shape)
    for layer in (ours, theirs):
        key = keras.ops.convert_to_numpy(layer._key_dense.kernel)
        value = keras.ops.convert_to_numpy(layer._value_dense.kernel)
        assert key.shape == value.shape == (16, 2, 8)
        assert not np.allclose(key, value), layer.name
