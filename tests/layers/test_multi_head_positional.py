"""Tests for `MultiHeadPositional`."""

import keras
import numpy as np
import pytest

import keras_attn
from tests import layer_test_case as ltc
from tests.backend import gradients, to_numpy, training
from tests.references import np_multi_head_positional as np_reference

RNG = np.random.default_rng(2)
FFS = [None, "concat", "per_head"]
POSITIONS = ["sinusoidal", "learned", None]


def x_data(b=2, t=6, d=8):
    return RNG.normal(size=(b, t, d)).astype("float32")


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("ff", FFS)
def test_matches_numpy_reference(position, ff):
    x, mem = x_data(t=5), x_data(t=7)
    layer = keras_attn.MultiHeadPositional(
        3,
        4,
        value_dim=5,
        position=position,
        max_length=9,
        feed_forward=ff,
        bias_initializer="random_normal",
    )
    qm = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], bool)
    vm = np.array([[1] * 7, [1, 1, 0, 0, 0, 0, 0]], bool)
    out, scores = layer(
        x, mem, query_mask=qm, value_mask=vm, return_attention_scores=True
    )
    fused = layer(x, mem, query_mask=qm, value_mask=vm)
    mask = qm[:, :, None] & vm[:, None, :]
    want, alpha = np_reference(layer, x, mem, mask)
    np.testing.assert_allclose(scores, alpha, atol=1e-5)
    np.testing.assert_allclose(out, want, atol=1e-4)
    np.testing.assert_allclose(fused, want, atol=1e-4)


def test_fused_op_path_equals_explicit_path():
    # Without scores asked for, Keras's `_compute_attention` runs the
    # backend's fused `dot_product_attention`; with them, its einsums.
    # Both agree, masks included.
    x, mem = x_data(t=5), x_data(t=7)
    qm = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], bool)
    vm = np.array([[1] * 7, [1, 1, 0, 0, 0, 0, 0]], bool)
    explicit = keras_attn.MultiHeadPositional(3, 4, max_length=9)
    fused = keras_attn.MultiHeadPositional(3, 4, max_length=9)
    explicit(x, mem)
    fused(x, mem)
    fused.set_weights(explicit.get_weights())
    want, _ = explicit(
        x, mem, query_mask=qm, value_mask=vm, return_attention_scores=True
    )
    for layer in (explicit, fused):
        got = layer(x, mem, query_mask=qm, value_mask=vm)
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_causal_padding_reaches_the_hook_without_a_dense_mask():
    """Causality goes to `_compute_attention` as `use_causal_mask` (the
    fused op's `is_causal`) and key padding as `(B, 1, 1, Tv)`: no
    `(Tq, Tv)` mask is built (the memory of long sequences on GPUs)."""
    seen = []
    x = x_data(t=6)
    pad = np.array([[0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]], bool)  # left+right
    spy = keras_attn.MultiHeadPositional(3, 4, max_length=9)
    plain = keras_attn.MultiHeadPositional(3, 4, max_length=9)
    spy(x)
    plain(x)
    spy.set_weights(plain.get_weights())
    # A spy on the instance: a subclass overriding `_compute_attention`
    # would get the full mask instead, as Keras's MultiHeadAttention does.
    compute = spy._compute_attention

    def watch(q, k, v, mask=None, *args, **kwargs):
        shape = None if mask is None else tuple(mask.shape)
        seen.append((shape, kwargs.get("use_causal_mask")))
        return compute(q, k, v, mask, *args, **kwargs)

    spy._compute_attention = watch
    fused = to_numpy(spy(x, query_mask=pad, use_causal_mask=True))
    assert seen[-1] == ((2, 1, 1, 6), True)
    # The explicit path (scores requested) and a NumPy reference agree.
    explicit, scores = plain(
        x, query_mask=pad, use_causal_mask=True, return_attention_scores=True
    )
    causal = np.tril(np.ones((6, 6), bool))
    mask = pad[:, :, None] & pad[:, None, :] & causal
    want, alpha = np_reference(plain, x, x, mask)
    np.testing.assert_allclose(to_numpy(scores), alpha, atol=1e-5)
    np.testing.assert_allclose(to_numpy(explicit), want, atol=1e-4)
    np.testing.assert_allclose(fused, want, atol=1e-4)
    assert np.all(fused[0, 0] == 0.0) and np.all(fused[0, 5] == 0.0)


@pytest.mark.parametrize("value_dim", [3, 4])
def test_equals_keras_multi_head_attention(value_dim):
    if value_dim != 3 and keras.backend.backend() == "jax":
        pytest.skip(
            "keras.layers.MultiHeadAttention itself fails on JAX when "
            "value_dim != key_dim (Keras 3.15: reshape error after "
            "jax.nn.dot_product_attention rejects the shapes)"
        )
    x, mem = x_data(t=5), x_data(t=7)
    vm = np.array([[1] * 7, [1, 1, 1, 0, 0, 0, 0]], bool)
    mha = keras.layers.MultiHeadAttention(
        num_heads=2, key_dim=3, value_dim=value_dim
    )
    ours = keras_attn.MultiHeadPositional(
        2, 3, value_dim=value_dim, position=None, feed_forward=None
    )
    want = mha(x, mem, attention_mask=vm[:, None, :])
    ours(x, mem)
    ours.set_weights(mha.get_weights())
    got = ours(x, mem, value_mask=vm)
    np.testing.assert_allclose(got, want, atol=1e-5)
    got_causal = ours(x, x, use_causal_mask=True)
    np.testing.assert_allclose(
        got_causal, mha(x, x, use_causal_mask=True), atol=1e-5
    )


@pytest.mark.parametrize("position", POSITIONS)
def test_permutation(position):
    x = x_data(t=6)
    layer = keras_attn.MultiHeadPositional(
        2, 4, position=position, max_length=6
    )
    perm = RNG.permutation(6)
    out = to_numpy(layer(x))
    out_perm = to_numpy(layer(x[:, perm]))
    if position is None:
        np.testing.assert_allclose(out_perm, out[:, perm], atol=1e-5)
    else:
        assert np.abs(out_perm - out[:, perm]).max() > 1e-3


@pytest.mark.parametrize("ff", FFS)
def test_causal_gradient_exactly_zero_with_padding(ff):
    x = x_data(t=6)
    layer = keras_attn.MultiHeadPositional(2, 4, feed_forward=ff)
    pad = np.array([[1] * 6, [1, 1, 1, 1, 0, 0]], bool)
    for i in range(6):

        def target(xt, i=i):
            out = layer(xt, query_mask=pad, use_causal_mask=True)
            return keras.ops.sum(out[:, i])

        _, (g,) = gradients(target, [x])
        assert np.all(g[:, i + 1 :] == 0)
        assert np.all(g[1, 4:] == 0)  # padding never influences outputs


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_fully_masked_rows_zero_not_nan(dtype):
    keras.utils.set_random_seed(0)
    layer = keras_attn.MultiHeadPositional(2, 4, dtype=dtype)
    x = x_data() * 100
    vm = np.array([[0] * 6, [1, 1, 0, 0, 0, 0]], bool)
    out, scores = layer(x, x, value_mask=vm, return_attention_scores=True)
    fused = layer(x, x, value_mask=vm)

    def loss(xt):
        o, _ = layer(xt, xt, value_mask=vm, return_attention_scores=True)
        return keras.ops.sum(keras.ops.cast(o, "float32"))

    _, grads = gradients(loss, [x], layer.trainable_weights)
    for t in (out, scores, fused):
        t = to_numpy(t, "float32")
        assert np.all(np.isfinite(t)) and np.all(t[0] == 0)
    for g in grads:
        assert np.all(np.isfinite(to_numpy(g, "float32")))


@pytest.mark.parametrize("seed", [10, 22, 28, 29])
def test_float16_fused_path_as_finite_as_the_explicit_one(seed):
    """Bug: the fused path scaled q·k after the float16 product, which
    overflowed to NaN outputs where the einsum path (query scaled first)
    stayed finite. These seeds overflowed in Keras 3.15's
    `MultiHeadAttention` as well."""
    keras.utils.set_random_seed(seed)
    layer = keras_attn.MultiHeadPositional(2, 4, dtype="float16")
    x = np.random.default_rng(seed).normal(size=(2, 6, 8)) * 100
    vm = np.array([[0] * 6, [1, 1, 0, 0, 0, 0]], bool)
    explicit, _ = layer(x, x, value_mask=vm, return_attention_scores=True)
    fused = to_numpy(layer(x, x, value_mask=vm), "float32")
    explicit = to_numpy(explicit, "float32")
    assert np.all(np.isfinite(explicit)) and np.all(np.isfinite(fused))
    np.testing.assert_allclose(fused, explicit, rtol=1e-2, atol=0.5)


def test_implicit_masks_and_self_attention():
    tokens = np.array([[3, 4, 5, 0], [6, 7, 0, 0]])
    inp = keras.Input((None,), dtype="int32")
    emb = keras.layers.Embedding(10, 8, mask_zero=True)
    layer = keras_attn.MultiHeadPositional(2, 4)
    out = layer(emb(inp))
    assert out._keras_mask is not None
    model = keras.Model(inp, out)
    want = layer(keras.ops.convert_to_numpy(emb(tokens)), query_mask=tokens > 0)
    got = model(tokens)
    np.testing.assert_allclose(got, want, atol=1e-6)
    # Padding invariance: appending padding leaves valid outputs unchanged.
    longer = np.concatenate([tokens, np.zeros((2, 3), int)], axis=1)
    np.testing.assert_allclose(
        to_numpy(model(longer))[:, :4], to_numpy(got), atol=1e-5
    )


def test_every_weight_gets_a_finite_gradient():
    layer = keras_attn.MultiHeadPositional(
        2, 4, position="learned", max_length=6, feed_forward="concat"
    )
    x = x_data()
    ltc.assert_finite_gradients(layer, lambda: layer(x))


@pytest.mark.slow
def test_symbolic_shapes_and_round_trip(tmp_path):
    inp = keras.Input((6, 8))
    out, scores = keras_attn.MultiHeadPositional(
        2,
        4,
        position="learned",
        max_length=6,
        feed_forward="per_head",
        output_dim=3,
        dropout=0.1,
    )(inp, return_attention_scores=True)
    assert out.shape == (None, 6, 3) and scores.shape == (None, 2, 6, 6)
    model = keras.Model(inp, [out, scores])
    ltc.assert_model_round_trips(model, x_data(), tmp_path)


@pytest.mark.slow
def test_learns_a_copy_task():
    """Causal model: predict the token seen 3 steps before (copy task)."""
    keras.utils.set_random_seed(0)
    n, t, vocab, lag = 512, 12, 8, 3
    tokens = RNG.integers(1, vocab, size=(n, t))
    target = np.roll(tokens, lag, axis=1)
    target[:, :lag] = 0
    inp = keras.Input((t,), dtype="int32")
    x = keras.layers.Embedding(vocab, 32)(inp)
    x = x + keras_attn.MultiHeadPositional(
        4, 8, position="learned", max_length=t, feed_forward="concat"
    )(x, use_causal_mask=True)
    logits = keras.layers.Dense(vocab)(x)
    model = keras.Model(inp, logits)
    model.compile(
        keras.optimizers.Adam(3e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    with training():
        model.fit(tokens, target, epochs=25, batch_size=64, verbose=0)
    pred = model.predict(tokens[:128], verbose=0).argmax(-1)
    acc = np.mean(pred[:, lag:] == target[:128, lag:])
    assert acc > 0.9, acc  # chance is 1/7


def test_config_round_trip():
    ltc.assert_config_round_trip(
        keras_attn.MultiHeadPositional(
            3,
            4,
            value_dim=2,
            position="learned",
            max_length=20,
            feed_forward="concat",
            feed_forward_dim=7,
            output_dim=5,
        )
    )


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"num_heads": 0, "key_dim": 4}, "num_heads=0"),
        ({"num_heads": 2, "key_dim": 4, "position": "rope"}, "position='rope'"),
        (
            {"num_heads": 2, "key_dim": 4, "position": "learned"},
            "max_length=None",
        ),
        (
            {"num_heads": 2, "key_dim": 4, "feed_forward": "mlp"},
            "feed_forward='mlp'",
        ),
    ],
)
def test_invalid_arguments(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        keras_attn.MultiHeadPositional(**kwargs)


def test_invalid_inputs():
    layer = keras_attn.MultiHeadPositional(
        2, 4, position="learned", max_length=4
    )
    with pytest.raises(ValueError, match="max_length=4"):
        layer(x_data(t=6))
    with pytest.raises(ValueError, match="batch size"):
        keras_attn.MultiHeadPositional(2, 4)(x_data(b=2), x_data(b=3))


def test_explicit_value_mask_holds_in_self_attention():
    # 0.2.0 replaced it by the query mask when `value` was None.
    x = x_data(t=5)
    keys = np.array([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1]], bool)
    layer = keras_attn.MultiHeadPositional(2, 4)
    want = to_numpy(layer(x, x, value_mask=keys))
    np.testing.assert_allclose(to_numpy(layer(x, value_mask=keys)), want)
    _, scores = layer(x, value_mask=keys, return_attention_scores=True)
    assert np.all(
        to_numpy(scores)[~np.broadcast_to(keys[:, None, None, :], scores.shape)]
        == 0.0
    )


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_padding_never_reaches_valid_outputs(bad):
    x, mem = x_data(t=4), x_data(t=6)
    qm = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)
    vm = np.array([[1] * 6, [1, 1, 1, 0, 0, 0]], bool)
    layer = keras_attn.MultiHeadPositional(2, 4, feed_forward="concat")
    clean = to_numpy(layer(x, mem, query_mask=qm, value_mask=vm))
    x2, mem2 = x.copy(), mem.copy()
    x2[0, 3], mem2[1, 3:] = bad, bad
    dirty = to_numpy(layer(x2, mem2, query_mask=qm, value_mask=vm))
    np.testing.assert_allclose(dirty, clean, atol=1e-6)
    self_clean = to_numpy(layer(x, query_mask=qm, use_causal_mask=True))
    self_dirty = to_numpy(layer(x2, query_mask=qm, use_causal_mask=True))
    np.testing.assert_allclose(self_dirty, self_clean, atol=1e-6)


@pytest.mark.parametrize("position", [None, "sinusoidal", "rotary"])
def test_self_attention_masks_keys_by_the_value_mask_alone(position):
    # Keys and values were taken from the query masked by the query mask:
    # outputs differed from layer(x, x, ...) by up to 0.95.
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    query_mask = np.array([[1, 1, 0, 0, 1], [1, 0, 1, 1, 1]], bool)
    value_mask = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 1]], bool)
    layer = keras_attn.MultiHeadPositional(2, 4, position=position)
    alone = layer(x, query_mask=query_mask, value_mask=value_mask)
    both = layer(x, x, query_mask=query_mask, value_mask=value_mask)
    np.testing.assert_allclose(to_numpy(alone), to_numpy(both), atol=1e-5)
