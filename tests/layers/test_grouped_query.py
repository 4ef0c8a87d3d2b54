"""`MultiHeadPositional(num_key_value_heads=...)` does what a user of
`keras.layers.GroupQueryAttention` relies on: the same weights, seed
generators and output shapes, implicit masks equal to the explicit
`attention_mask` they stand for, `attention_mask` of every shape against a
NumPy reference of grouped heads, float16 with flash attention left to the
backend, dropout only in training, and distinct initial kernels. Our own
tests, written from the behaviours Keras's GQA tests cover; the one
documented difference is that a query with no key gets zeros (Keras: an
average of the values). Backend-agnostic (the JAX and PyTorch suite)."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn import MultiHeadPositional

HEADS = [(4, 4), (4, 2), (4, 1)]  # (query heads, key/value heads)


def ours(h, kv, **kwargs):
    return MultiHeadPositional(
        h, 2, num_key_value_heads=kv, position=None, **kwargs
    )


def keras_gqa(h, kv, **kwargs):
    return keras.layers.GroupQueryAttention(
        head_dim=2, num_query_heads=h, num_key_value_heads=kv, **kwargs
    )


def np_gqa(layer, query, value, allowed, key=None):
    """Grouped-query attention from the formula, float64: key/value head
    `j` serves query heads `j*g .. j*g+g-1`; `allowed` broadcasts to
    `(B, H, Tq, Tv)`; a query with no allowed key gives zeros."""
    w = [np.asarray(ops.convert_to_numpy(v), "float64") for v in layer.weights]
    (qk, qb), (kk, kb), (vk, vb), (ok, ob) = zip(w[::2], w[1::2], strict=True)
    q = np.einsum("btd,dhk->bthk", query, qk) + qb
    key = value if key is None else key
    k = np.einsum("btd,dhk->bthk", key, kk) + kb
    v = np.einsum("btd,dhk->bthk", value, vk) + vb
    g = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)
    s = np.einsum("bqhk,bthk->bhqt", q, k) / np.sqrt(q.shape[-1])
    allowed = np.broadcast_to(allowed, s.shape)
    s = np.where(allowed, s, -np.inf)
    top = np.max(np.where(allowed, s, -1e300), -1, keepdims=True)
    e = np.where(allowed, np.exp(s - top), 0.0)
    total = e.sum(-1, keepdims=True)
    a = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    out = np.einsum("bhqt,bthk->bqhk", a, v)
    out = np.einsum("bqhk,hkd->bqd", out, ok) + ob
    rows = allowed.any(axis=(1, 3))[..., None]
    return np.where(rows, out, 0.0)


@pytest.mark.parametrize("h, kv", HEADS)
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"use_bias": False}, {"use_gate": True}, {"dropout": 0.5}],
    ids=str,
)
def test_weights_and_seed_generators_are_keras_gqas(h, kv, kwargs):
    a, b = ours(h, kv, **kwargs), keras_gqa(h, kv, **kwargs)
    x, y = np.ones((2, 8, 16), "float32"), np.ones((2, 4, 16), "float32")
    a(x, y)
    b(x, y)
    assert [w.shape for w in a.trainable_weights] == [
        w.shape for w in b.trainable_weights
    ]
    assert len(a.non_trainable_weights) == len(b.non_trainable_weights) == 0
    assert len(a._seed_generators) == len(b._seed_generators)
    assert a.supports_masking


@pytest.mark.parametrize("h, kv", HEADS)
@pytest.mark.parametrize("key_dims", [None, (2, 3)])
def test_output_shape_is_computed_before_the_call(h, kv, key_dims):
    layer = ours(h, kv)
    q, v = np.ones((7, 4, 8), "float32"), np.ones((7, 2, 8), "float32")
    k = None if key_dims is None else np.ones((7, *key_dims), "float32")
    out = layer(q, v, k)
    want = layer.compute_output_shape(q.shape, v.shape, key_dims and k.shape)
    assert tuple(out.shape) == tuple(want) == (7, 4, 8)


def test_key_and_value_that_disagree_are_refused():
    with pytest.raises(ValueError, match="must be equal"):
        ours(4, 2).compute_output_shape((2, 4, 8), (2, 2, 8), (2, 1, 7))


def test_projections_start_from_distinct_draws():
    layer = ours(
        16,
        4,
        use_gate=True,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
    )
    layer.build((2, 4, 8), (2, 4, 8))
    kernels = {
        name: ops.convert_to_numpy(getattr(layer, f"_{name}_dense").kernel)
        for name in ("query", "key", "value", "output", "gate")
    }
    q = kernels.pop("query")
    for name, kernel in kernels.items():
        n = min(q.size, kernel.size)
        assert not np.allclose(q.ravel()[:n], kernel.ravel()[:n]), name


@pytest.mark.parametrize("use_gate", [False, True])
def test_the_query_mask_reaches_the_output(use_gate):
    tokens = np.array([[1, 2, 3, 0, 0], [3, 3, 1, 1, 2], [1, 0, 0, 0, 0]])
    query = keras.layers.Embedding(4, 8, mask_zero=True)(tokens)
    value = np.random.default_rng(0).normal(size=(3, 3, 8)).astype("float32")
    out = ours(4, 2, use_gate=use_gate)(query, value)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(out._keras_mask), tokens != 0
    )


@pytest.mark.parametrize("h, kv", HEADS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("use_gate", [False, True])
def test_implicit_masks_equal_the_attention_mask_they_stand_for(
    h, kv, causal, use_gate
):
    q_tokens = np.array([[1, 2, 3, 0, 0], [3, 3, 1, 1, 2], [1, 0, 0, 0, 0]])
    v_tokens = np.array([[5, 4, 0], [3, 0, 0], [2, 1, 1]])
    query = keras.layers.Embedding(4, 8, mask_zero=True)(q_tokens)
    value = keras.layers.Embedding(6, 8, mask_zero=True)(v_tokens)
    layer = ours(h, kv, use_gate=use_gate)
    implicit = layer(query, value, use_causal_mask=causal)
    mask = (q_tokens != 0)[:, :, None] & (v_tokens != 0)[:, None, :]
    if causal:
        mask &= np.tril(np.ones((5, 3), bool))
    plain = ops.convert_to_numpy(query), ops.convert_to_numpy(value)
    explicit = layer(*plain, attention_mask=mask)
    np.testing.assert_allclose(
        ops.convert_to_numpy(implicit),
        ops.convert_to_numpy(explicit),
        atol=1e-6,
    )


@pytest.mark.parametrize("h, kv", HEADS)
@pytest.mark.parametrize(
    "shape", [(3, 5, 4), (1, 5, 4), (5, 4), (3, "H", 5, 4), (3, 1, 5, 4)]
)
def test_attention_mask_of_every_shape_matches_the_reference(h, kv, shape):
    rng = np.random.default_rng(1)
    query = rng.normal(size=(3, 5, 8)).astype("float32")
    value = rng.normal(size=(3, 4, 6)).astype("float32")
    shape = tuple(h if d == "H" else d for d in shape)  # per query head
    mask = rng.random(shape) > 0.4
    layer = ours(h, kv)
    got = ops.convert_to_numpy(layer(query, value, attention_mask=mask))
    allowed = mask if len(shape) == 4 else mask.reshape((-1, 1, 5, 4))
    want = np_gqa(layer, query, value, allowed)
    np.testing.assert_allclose(got, want, atol=2e-5)


@pytest.mark.parametrize("flash", [False, True])
def test_float16_with_flash_left_to_the_backend(flash):
    """Identity projections in float16 (flash needs a half dtype and a
    head size that is a multiple of 8), with flash enabled or not in
    Keras's config: ours equals the reference wherever Keras's own GQA
    runs, and fails as it does where it does not."""
    enabled = keras.config.is_flash_attention_enabled()
    (
        keras.config.enable_flash_attention
        if flash
        else keras.config.disable_flash_attention
    )()
    try:
        n = 8
        query = key = np.identity(n)[None].astype("float16")
        value = (np.arange(n * n).reshape(1, n, n) / 100.0).astype("float16")
        kernel = np.repeat(np.identity(n)[:, None, :], 8, axis=1)
        weights = [kernel, np.zeros((8, n))] * 3
        weights += [kernel, np.zeros((n,))]
        layers = [
            MultiHeadPositional(
                8, n, num_key_value_heads=8, position=None, dtype="float16"
            ),
            keras.layers.GroupQueryAttention(
                head_dim=n,
                num_query_heads=8,
                num_key_value_heads=8,
                dtype="float16",
            ),
        ]
        results = []
        for layer in layers:
            layer.build(query.shape, value.shape, key.shape)
            layer.set_weights(weights)
            try:
                out = layer(query, value, key)
                results.append(ops.convert_to_numpy(out).astype("float64"))
            except Exception as error:  # flash refused on this machine
                results.append(type(error))
        if isinstance(results[1], type):
            assert results[0] is results[1]
            return
        allowed = np.ones((1, 1, n, n), bool)
        want = np_gqa(layers[0], query, value, allowed, key=key)
        np.testing.assert_allclose(results[0], results[1], atol=2e-3)
        np.testing.assert_allclose(results[0], want, atol=1e-2)
    finally:
        (
            keras.config.enable_flash_attention
            if enabled
            else keras.config.disable_flash_attention
        )()


def test_dropout_acts_in_training_only():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    layer, plain = ours(4, 2, dropout=0.5, seed=3), ours(4, 2)
    layer(x, x)
    plain(x, x)
    plain.set_weights(layer.get_weights())
    inference = ops.convert_to_numpy(layer(x, x, training=False))
    np.testing.assert_allclose(
        inference, ops.convert_to_numpy(plain(x, x)), atol=1e-6
    )
    trained = ops.convert_to_numpy(layer(x, x, training=True))
    assert not np.allclose(trained, inference, atol=1e-3)


@pytest.mark.parametrize("kv", [4, 2])
def test_a_subclass_with_the_older_compute_attention_gets_the_causal_mask(kv):
    """Keras passes `use_causal_mask` to `_compute_attention` only when it
    runs its own; an override with `MultiHeadAttention`'s earlier
    signature receives the causal mask instead, and computes the same
    outputs. (Keras's `GroupedQueryAttention` passes no
    `return_attention_scores`; ours, an MHA subclass, does.)"""
    seen = []

    class Older(MultiHeadPositional):
        def _compute_attention(
            self,
            query,
            key,
            value,
            attention_mask=None,
            training=None,
            return_attention_scores=False,
        ):
            seen.append(attention_mask is not None)
            return super()._compute_attention(
                query, key, value, attention_mask, training
            )

    x = np.random.default_rng(3).normal(size=(2, 5, 16)).astype("float32")
    older = Older(4, 4, num_key_value_heads=kv, position=None)
    plain = MultiHeadPositional(4, 4, num_key_value_heads=kv, position=None)
    older(x, x)
    plain(x, x)
    plain.set_weights(older.get_weights())
    got = older(x, x, use_causal_mask=True)
    assert seen[-1]
    np.testing.assert_allclose(
        ops.convert_to_numpy(got),
        ops.convert_to_numpy(plain(x, x, use_causal_mask=True)),
        atol=1e-6,
    )


def test_compute_attention_takes_every_query_head_as_keras_gqa_does():
    """The override point's contract: keys and values come in with the
    grouped heads already repeated, `(B, T, num_heads, K)`."""
    layer = ours(4, 2)
    layer.build((1, 5, 16), (1, 5, 16))
    rng = np.random.default_rng(4)
    q, k, v = (rng.normal(size=(1, 5, 4, 2)).astype("float32") for _ in "qkv")
    causal = np.tril(np.ones((5, 5), bool))[None]
    extra = np.ones((1, 5, 5), bool)
    extra[:, 3, 1] = False
    both, _ = layer._compute_attention(
        q, k, v, attention_mask=extra, use_causal_mask=True
    )
    merged, _ = layer._compute_attention(q, k, v, attention_mask=extra & causal)
    np.testing.assert_allclose(
        ops.convert_to_numpy(both), ops.convert_to_numpy(merged), atol=1e-5
    )
