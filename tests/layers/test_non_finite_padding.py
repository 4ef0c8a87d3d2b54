"""NaN or inf at padded positions never reaches a valid output, in any
layer (0.2.0 multiplied masked values by a zero weight: `0 * nan` is nan).
Part of the layer suite run on every backend."""

import numpy as np
import pytest

import keras_attn
from tests.backend import to_numpy

RNG = np.random.default_rng(4)
Q = RNG.normal(size=(2, 4, 8)).astype("float32")
V = RNG.normal(size=(2, 6, 8)).astype("float32")
QM = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)
VM = np.array([[1] * 6, [1, 1, 1, 0, 0, 0]], bool)


def poisoned(bad):
    q, v = Q.copy(), V.copy()
    q[0, 3], v[1, 3:] = bad, bad
    return q, v


CROSS = {
    "dot": lambda: keras_attn.Attention("dot"),
    "general": lambda: keras_attn.Attention("general"),
    "low_rank": lambda: keras_attn.Attention("low_rank", rank=4),
    "additive": lambda: keras_attn.Attention("additive", units=8),
    "AdditiveAttention": lambda: keras_attn.AdditiveAttention(units=8),
    "MultiHeadPositional": lambda: keras_attn.MultiHeadPositional(2, 4),
}


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("kind", sorted(CROSS))
def test_cross_attention_layers(kind, bad):
    layer = CROSS[kind]()
    masks = {"query_mask": QM, "value_mask": VM}
    clean = to_numpy(layer(Q, V, **masks))
    q, v = poisoned(bad)
    dirty = to_numpy(layer(q, v, **masks))
    valid = QM[..., None]
    assert np.all(np.isfinite(dirty))
    np.testing.assert_allclose(
        np.where(valid, dirty, 0), np.where(valid, clean, 0), atol=1e-6
    )


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_structured_self_attention(bad):
    layer = keras_attn.StructuredSelfAttention(8, 3, penalty_coefficient=1.0)
    clean, a = (
        to_numpy(t) for t in layer(V, mask=VM, return_attention_scores=True)
    )
    _, v = poisoned(bad)
    dirty, b = (
        to_numpy(t) for t in layer(v, mask=VM, return_attention_scores=True)
    )
    assert np.all(np.isfinite(dirty)) and np.all(np.isfinite(b))
    np.testing.assert_allclose(dirty, clean, atol=1e-6)
    np.testing.assert_allclose(b, a, atol=1e-6)
