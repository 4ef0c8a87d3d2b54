"""Tests for `Attention` and `AdditiveAttention` (every score)."""

import keras
import numpy as np
import pytest

import keras_attn
from tests import layer_test_case as ltc
from tests.backend import gradients, to_numpy
from tests.references import np_scores

SCORES = ["dot", "scaled_dot", "general", "low_rank", "additive", "concat"]
RNG = np.random.default_rng(0)


def make(score, **kwargs):
    return keras_attn.Attention(score=score, units=6, rank=3, **kwargs)


def data(b=2, tq=3, tv=5, d=4, dv=None):
    q = RNG.normal(size=(b, tq, d)).astype("float32")
    v = RNG.normal(size=(b, tv, dv or d)).astype("float32")
    k = RNG.normal(size=(b, tv, d)).astype("float32")
    return q, v, k


@pytest.mark.parametrize("score", SCORES)
def test_matches_numpy_reference_with_masks(score):
    q, v, k = data(dv=7)
    layer = make(score)
    qm = np.array([[1, 1, 0], [1, 1, 1]], bool)
    vm = np.array([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1]], bool)
    ctx, w = layer(
        q,
        v,
        key=k,
        query_mask=qm,
        value_mask=vm,
        return_attention_scores=True,
    )
    mask = qm[:, :, None] & vm[:, None, :]
    want_w = ltc.np_masked_softmax(np_scores(layer, q, k), mask)
    np.testing.assert_allclose(w, want_w, atol=1e-5)
    np.testing.assert_allclose(ctx, want_w @ v, atol=1e-5)
    assert np.all(to_numpy(w)[~mask] == 0.0)


@pytest.mark.parametrize("score", SCORES)
def test_causal_matches_reference(score):
    q, v, _ = data(tq=5, tv=5)
    layer = make(score)
    _, w = layer(q, v, use_causal_mask=True, return_attention_scores=True)
    mask = np.tril(np.ones((5, 5), bool))[None]
    want = ltc.np_masked_softmax(np_scores(layer, q, v), mask)
    np.testing.assert_allclose(w, want, atol=1e-5)


def test_additive_attention_is_attention_additive():
    q, v, _ = data(dv=5)
    a = keras_attn.AdditiveAttention(units=6)
    b = keras_attn.Attention("additive", units=6)
    a(q, v)
    b(q, v)
    b.set_weights(a.get_weights())
    np.testing.assert_array_equal(a(q, v), b(q, v))
    assert a.get_config()["units"] == 6
    assert "score" not in a.get_config()


@pytest.mark.parametrize("score", SCORES)
def test_padding_does_not_change_valid_outputs(score):
    q, v, _ = data(tv=5)
    layer = make(score)
    vm = np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], bool)
    ctx = layer(q, v, value_mask=vm)
    pad = RNG.normal(size=(2, 4, 4)).astype("float32") * 100
    v2 = np.concatenate([v, pad], axis=1)
    vm2 = np.concatenate([vm, np.zeros((2, 4), bool)], axis=1)
    ctx2, w2 = layer(q, v2, value_mask=vm2, return_attention_scores=True)
    np.testing.assert_allclose(ctx2, ctx, atol=1e-5)
    assert np.all(to_numpy(w2)[:, :, 5:] == 0.0)


@pytest.mark.parametrize("score", SCORES)
def test_implicit_keras_masks_agree_with_explicit(score):
    tokens_q = np.array([[3, 4, 0], [5, 0, 0]])
    tokens_v = np.array([[1, 2, 3, 0, 0], [4, 5, 6, 7, 0]])
    q_in = keras.Input((None,), dtype="int32")
    v_in = keras.Input((None,), dtype="int32")
    emb = keras.layers.Embedding(10, 4, mask_zero=True)
    layer = make(score)
    ctx, w = layer(emb(q_in), emb(v_in), return_attention_scores=True)
    assert ctx._keras_mask is not None  # the query mask propagates
    model = keras.Model([q_in, v_in], [ctx, w])
    got_ctx, got_w = model([tokens_q, tokens_v])
    e = keras.ops.convert_to_numpy
    want_ctx, want_w = layer(
        e(emb(tokens_q)),
        e(emb(tokens_v)),
        query_mask=tokens_q > 0,
        value_mask=tokens_v > 0,
        return_attention_scores=True,
    )
    np.testing.assert_allclose(got_ctx, want_ctx, atol=1e-6)
    np.testing.assert_allclose(got_w, want_w, atol=1e-6)
    pad = np.broadcast_to(tokens_v[:, None, :] == 0, got_w.shape)
    assert np.all(to_numpy(got_w)[pad] == 0)
    assert np.all(to_numpy(got_ctx)[tokens_q == 0] == 0)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("score", SCORES)
def test_fully_masked_rows_are_zero_and_gradients_finite(score, dtype):
    q, v, _ = data()
    layer = make(score, dtype=dtype)
    vm = np.array([[0, 0, 0, 0, 0], [1, 1, 0, 0, 0]], bool)
    v = v * 50  # large scores
    ctx, w = layer(q, v, value_mask=vm, return_attention_scores=True)

    def loss(qt, vt):
        out = layer(qt, vt, value_mask=vm)
        return keras.ops.sum(keras.ops.cast(out, "float32"))

    _, grads = gradients(loss, [q, v], layer.trainable_weights)
    assert keras.backend.standardize_dtype(ctx.dtype) == dtype
    ctx, w = to_numpy(ctx, "float32"), to_numpy(w, "float32")
    assert np.all(ctx[0] == 0) and np.all(w[0] == 0)
    assert np.all(np.isfinite(ctx)) and np.all(np.isfinite(w))
    np.testing.assert_allclose(w[1].sum(-1), 1.0, atol=1e-2)
    for g in grads:
        assert np.all(np.isfinite(to_numpy(g, "float32")))


@pytest.mark.parametrize("score", SCORES)
def test_causal_gradient_is_exactly_zero_for_future(score):
    q, v, _ = data(tq=5, tv=5)
    layer = make(score)
    for i in range(5):

        def out(vt, i=i):
            ctx = layer(q, vt, use_causal_mask=True)
            return keras.ops.sum(ctx[:, i])

        _, (g,) = gradients(out, [v])
        assert np.all(g[:, i + 1 :] == 0.0)
        assert np.any(g[:, : i + 1] != 0.0)


@pytest.mark.parametrize("score", ["general", "low_rank", "additive", "concat"])
def test_every_weight_gets_a_finite_gradient(score):
    q, v, _ = data()
    layer = make(score)
    ltc.assert_finite_gradients(layer, lambda: layer(q, v))


@pytest.mark.slow
@pytest.mark.parametrize("score", SCORES)
def test_model_trains_and_round_trips(score, tmp_path):
    """Learn to fetch the value at a position named by the query."""
    n, t, d = 64, 6, 8
    keys = RNG.normal(size=(n, t, d)).astype("float32")
    target = RNG.integers(0, t, size=n)
    query = keys[np.arange(n), target][:, None, :]  # (n, 1, d)
    vals = RNG.normal(size=(n, t, 1)).astype("float32")
    y = vals[np.arange(n), target]  # (n, 1)
    qi, vi, ki = (keras.Input((1, d)), keras.Input((t, 1)), keras.Input((t, d)))
    ctx = make(score, dropout=0.1)(keras.layers.Dense(d)(qi), vi, key=ki)
    model = keras.Model([qi, vi, ki], keras.layers.Flatten()(ctx))
    ltc.assert_trains(model, [query, vals, keys], y, steps=40)
    ltc.assert_model_round_trips(model, [query, vals, keys], tmp_path)


@pytest.mark.parametrize("score", SCORES)
def test_config_round_trip(score):
    ltc.assert_config_round_trip(make(score, dropout=0.2, use_bias=False))


def test_symbolic_two_outputs_shapes():
    q_in, v_in = keras.Input((7, 4)), keras.Input((None, 3))
    layer = keras_attn.AdditiveAttention(5)
    ctx, w = layer(q_in, v_in, return_attention_scores=True)
    assert ctx.shape == (None, 7, 3)
    assert w.shape == (None, 7, None)
    assert layer.compute_output_shape((2, 7, 4), (2, 9, 3)) == (2, 7, 3)


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"score": "cosine"}, "score='cosine'"),
        ({"score": "low_rank"}, "rank=None"),
        ({"score": "low_rank", "rank": 0}, "rank=0"),
        ({"score": "additive"}, "units=None"),
        ({"score": "additive", "units": -2}, "units=-2"),
        ({"score": "dot", "dropout": 1.5}, "dropout=1.5"),
    ],
)
def test_invalid_arguments(kwargs, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(")):
        keras_attn.Attention(**kwargs)


def test_invalid_inputs():
    q, v, _ = data()
    with pytest.raises(ValueError, match="batch size"):
        make("general")(q, v[:1])
    with pytest.raises(ValueError, match="query.shape"):
        make("dot")(q, RNG.normal(size=(2, 5, 3)).astype("float32"))
    with pytest.raises(ValueError, match="rank 3"):
        make("dot")(q[0], v[0])


@pytest.mark.parametrize("chunk_size", [1, 2, 4])
def test_chunked_additive_equals_one_block(chunk_size):
    q, v, _ = data(tq=5, tv=6)
    vm = np.array([[1] * 6, [1, 1, 1, 0, 0, 0]], bool)
    whole = keras_attn.AdditiveAttention(6)
    chunked = keras_attn.AdditiveAttention(6, chunk_size=chunk_size)
    whole(q, v)
    chunked(q, v)
    chunked.set_weights(whole.get_weights())
    a_ctx, a_w = whole(q, v, value_mask=vm, return_attention_scores=True)
    b_ctx, b_w = chunked(q, v, value_mask=vm, return_attention_scores=True)
    np.testing.assert_allclose(b_ctx, a_ctx, atol=1e-6)
    np.testing.assert_allclose(b_w, a_w, atol=1e-6)
    want_w = ltc.np_masked_softmax(np_scores(whole, q, v), vm[:, None, :])
    np.testing.assert_allclose(b_w, want_w, 1e-5)

    def loss(layer):
        def f(qt, vt):
            ctx = layer(qt, vt, value_mask=vm)
            return keras.ops.sum(keras.ops.square(ctx))

        return f

    _, g_whole = gradients(loss(whole), [q, v], whole.trainable_weights)
    _, g_chunk = gradients(loss(chunked), [q, v], chunked.trainable_weights)
    for a, b in zip(g_whole, g_chunk, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    assert chunked.get_config()["chunk_size"] == chunk_size


def test_chunk_size_must_be_positive():
    with pytest.raises(ValueError, match="chunk_size=0"):
        keras_attn.AdditiveAttention(4, chunk_size=0)
