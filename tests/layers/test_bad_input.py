"""Bad input to the layers: masks of the wrong shape or dtype.

The rest of the bad-input table (docs/export.md, "Bad input") is tested beside
each layer (`test_invalid_arguments`, `test_invalid_inputs`), in
`test_positional.py`, and for files and the CLI in `test_export.py`.
"""

import numpy as np
import pytest

import keras_attn
from tests.backend import to_numpy

RNG = np.random.default_rng(3)
Q = RNG.normal(size=(2, 3, 4)).astype("float32")
V = RNG.normal(size=(2, 5, 4)).astype("float32")


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"value_mask": np.ones((2, 6), bool)}, r"value_mask.shape=\(2, 6\)"),
        ({"value_mask": np.ones((2, 5, 1), bool)}, "value_mask.shape"),
        ({"query_mask": np.ones((3, 3), bool)}, r"query_mask.shape=\(3, 3\)"),
    ],
)
@pytest.mark.parametrize("score", ["dot", "additive"])
def test_attention_mask_of_wrong_shape(score, kwargs, needle):
    layer = keras_attn.Attention(score=score, units=4)
    with pytest.raises(ValueError, match=needle):
        layer(Q, V, **kwargs)


def test_multi_head_attention_mask_of_wrong_shape():
    layer = keras_attn.MultiHeadPositional(2, 4)
    with pytest.raises(ValueError, match=r"attention_mask.shape=\(2, 3, 4\)"):
        layer(Q, V, attention_mask=np.ones((2, 3, 4), bool))
    with pytest.raises(ValueError, match="value_mask.shape"):
        layer(Q, V, value_mask=np.ones((5,), bool))


def test_structured_self_attention_mask_of_wrong_shape():
    layer = keras_attn.StructuredSelfAttention(4, 2)
    with pytest.raises(ValueError, match=r"mask.shape=\(2, 4\)"):
        layer(V, mask=np.ones((2, 4), bool))


@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_numeric_masks_mean_nonzero_is_kept(dtype):
    mask = np.array([[1, 1, 0, 0, 1], [0, 1, 1, 1, 1]])
    for layer, call in (
        (
            keras_attn.Attention(score="general"),
            lambda ly, m: ly(Q, V, value_mask=m, return_attention_scores=True),
        ),
        (
            keras_attn.MultiHeadPositional(2, 4),
            lambda ly, m: ly(Q, V, value_mask=m, return_attention_scores=True),
        ),
        (
            keras_attn.StructuredSelfAttention(4, 2),
            lambda ly, m: ly(V, mask=m, return_attention_scores=True),
        ),
    ):
        want = [to_numpy(t) for t in call(layer, mask.astype(bool))]
        got = [to_numpy(t) for t in call(layer, mask.astype(dtype))]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, atol=1e-6)
        weights = got[1]
        # weights never reach a masked key
        assert np.all(weights[..., mask[0] == 0][0] == 0)


@pytest.mark.parametrize(
    "make, call",
    [
        (
            lambda: keras_attn.StructuredSelfAttention(4, 2),
            lambda ly, x: ly(x),
        ),
        (
            lambda: keras_attn.Attention(score="general"),
            lambda ly, x: ly(x, x),
        ),
        (
            lambda: keras_attn.AdditiveAttention(4),
            lambda ly, x: ly(x, x),
        ),
        (
            lambda: keras_attn.MultiHeadPositional(2, 4),
            lambda ly, x: ly(x, x),
        ),
    ],
    ids=["ssa", "general", "additive", "mhp"],
)
def test_width_or_rank_other_than_built(make, call):
    layer = make()
    call(layer, Q)  # builds for width 4
    with pytest.raises(ValueError, match=r"shape=\(2, 3, 6\)"):
        call(layer, np.ones((2, 3, 6), "float32"))
    with pytest.raises(ValueError, match=r"shape=\(3, 4\)"):
        call(layer, np.ones((3, 4), "float32"))
