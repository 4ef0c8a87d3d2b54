"""Property tests: random shapes and masks against the NumPy references.

Profiles: `fast` (default, a few cases per layer) and `thorough`
(`HYPOTHESIS_PROFILE=thorough python -m pytest tests/layers/test_properties.py`,
500 cases per layer).
"""

import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import keras_attn
from tests import layer_test_case as ltc
from tests.references import np_multi_head_positional as np_mhp
from tests.references import np_scores
from tests.references import np_structured_self_attention as np_ssa

# Under the suite's default profile ("ci", tests/conftest.py) each
# property runs 8 derandomized cases; under another (`thorough`: 500,
# `explore`) it runs the profile's count.
PROPERTY = settings(
    max_examples=8
    if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci"
    else settings.default.max_examples,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def masks(draw, batch, length):
    """Random masks, including all-padding rows and full rows."""
    kind = draw(st.sampled_from(["random", "prefix", "none", "empty"]))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    if kind == "none":
        return np.ones((batch, length), bool)
    if kind == "empty":
        m = rng.random((batch, length)) < 0.5
        m[0] = False  # one all-padding sequence
        return m
    if kind == "prefix":
        lengths = rng.integers(0, length + 1, size=batch)
        return np.arange(length)[None] < lengths[:, None]
    return rng.random((batch, length)) < 0.6


@st.composite
def cross_case(draw):
    b = draw(st.integers(1, 3))
    tq, tv = draw(st.integers(1, 6)), draw(st.integers(1, 7))
    d, dv = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(b, tq, d)).astype("float32")
    v = rng.normal(size=(b, tv, dv)).astype("float32")
    k = rng.normal(size=(b, tv, d)).astype("float32")
    return q, v, k, draw(masks(b, tq)), draw(masks(b, tv))


@PROPERTY
@given(
    case=cross_case(),
    score=st.sampled_from(keras_attn.layers.attention.scores.SCORES),
    causal=st.booleans(),
)
def test_attention_property(case, score, causal):
    q, v, k, qm, vm = case
    layer = keras_attn.Attention(score, units=3, rank=2)
    ctx, w = layer(
        q,
        v,
        key=k,
        query_mask=qm,
        value_mask=vm,
        use_causal_mask=causal,
        return_attention_scores=True,
    )
    mask = qm[:, :, None] & vm[:, None, :]
    if causal:
        tq, tv = q.shape[1], v.shape[1]
        mask = mask & (np.arange(tq)[:, None] >= np.arange(tv)[None])
    want = ltc.np_masked_softmax(np_scores(layer, q, k), mask)
    np.testing.assert_allclose(w, want, atol=1e-5)
    np.testing.assert_allclose(ctx, want @ v, atol=1e-4)
    assert np.all(np.isfinite(np.asarray(ctx)))


@PROPERTY
@given(
    b=st.integers(1, 3),
    t=st.integers(1, 8),
    d=st.integers(1, 6),
    hops=st.integers(1, 4),
    data=st.data(),
)
def test_structured_self_attention_property(b, t, d, hops, data):
    mask = data.draw(masks(b, t))
    h = (
        np.random.default_rng(data.draw(st.integers(0, 999)))
        .normal(size=(b, t, d))
        .astype("float32")
    )
    layer = keras_attn.StructuredSelfAttention(4, hops, 0.7)
    m, a = layer(h, mask=mask, return_attention_scores=True)
    want_a, want_m, want_p = np_ssa(layer, h, mask)
    np.testing.assert_allclose(a, want_a, atol=1e-5)
    np.testing.assert_allclose(m, want_m, atol=1e-4)
    np.testing.assert_allclose(
        layer.losses[0], 0.7 * want_p, rtol=1e-4, atol=1e-5
    )


@PROPERTY
@given(
    b=st.integers(1, 3),
    tq=st.integers(1, 6),
    tv=st.integers(1, 6),
    heads=st.integers(1, 3),
    # key_dim=1 meets a Keras 3.15 TensorFlow bias bug when T == heads
    # (tests/layers/test_keras_machinery.py, docs/keras-differences.md).
    key_dim=st.integers(2, 4),
    position=st.sampled_from(["sinusoidal", "learned", None]),
    ff=st.sampled_from([None, "concat", "per_head"]),
    data=st.data(),
)
def test_multi_head_positional_property(
    b, tq, tv, heads, key_dim, position, ff, data
):
    rng = np.random.default_rng(data.draw(st.integers(0, 999)))
    x = rng.normal(size=(b, tq, 4)).astype("float32")
    mem = rng.normal(size=(b, tv, 4)).astype("float32")
    qm, vm = data.draw(masks(b, tq)), data.draw(masks(b, tv))
    layer = keras_attn.MultiHeadPositional(
        heads,
        key_dim,
        position=position,
        max_length=8,
        feed_forward=ff,
        bias_initializer="random_normal",
    )
    out, scores = layer(
        x, mem, query_mask=qm, value_mask=vm, return_attention_scores=True
    )
    mask = qm[:, :, None] & vm[:, None, :]
    want, alpha = np_mhp(layer, x, mem, mask)
    np.testing.assert_allclose(scores, alpha, atol=1e-5)
    np.testing.assert_allclose(out, want, atol=1e-4)
    fused = layer(x, mem, query_mask=qm, value_mask=vm)
    np.testing.assert_allclose(fused, want, atol=1e-4)
