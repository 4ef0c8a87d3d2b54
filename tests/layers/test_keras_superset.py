"""Keras arguments our layers accept, each against what Keras's own
`Attention` / `MultiHeadAttention` does with it."""

import keras
import numpy as np
import pytest

import keras_attn
from tests.backend import to_numpy

RNG = np.random.default_rng(8)
Q = RNG.normal(size=(2, 3, 4)).astype("float32")
V = RNG.normal(size=(2, 5, 4)).astype("float32")


def test_use_scale_equals_keras_attention_with_use_scale():
    ours = keras_attn.Attention(use_scale=True)
    theirs = keras.layers.Attention(use_scale=True)
    ours(Q, V), theirs([Q, V])
    for layer in (ours, theirs):
        layer.scale.assign(2.5)
    np.testing.assert_allclose(
        to_numpy(ours(Q, V)), to_numpy(theirs([Q, V])), atol=1e-5
    )
    assert ours.get_config()["use_scale"] is True
    again = keras_attn.Attention.from_config(ours.get_config())
    again(Q, V)
    assert [w.name for w in again.weights] == ["scale"]
    with pytest.raises(ValueError, match="use_scale=True"):
        keras_attn.Attention(score="additive", units=4, use_scale=True)


def test_seeded_dropout_repeats():
    for make, call in (
        (
            lambda: keras_attn.Attention(dropout=0.5, seed=3),
            lambda ly: ly(Q, V, training=True),
        ),
        (
            lambda: keras_attn.MultiHeadPositional(
                2, 2, position=None, dropout=0.5, seed=3
            ),
            lambda ly: ly(Q, V, training=True, return_attention_scores=True)[0],
        ),
    ):
        a, b = make(), make()
        call(a), call(b)
        b.set_weights(a.get_weights())
        np.testing.assert_array_equal(to_numpy(call(a)), to_numpy(call(b)))
        assert make().get_config()["seed"] == 3


@pytest.mark.parametrize("kind", ["attention", "mhp", "ssa"])
def test_constraints_and_regularizers_reach_every_weight(kind):
    nonneg = keras.constraints.NonNeg()
    if kind == "ssa":
        layer = keras_attn.StructuredSelfAttention(
            4,
            2,
            use_bias=True,
            kernel_constraint=nonneg,
            bias_constraint=nonneg,
            bias_regularizer="l2",
            activity_regularizer="l2",
            seed=5,
        )
        layer(V)
        assert all(w.constraint is not None for w in layer.trainable_weights)
        assert len(layer.losses) >= 3  # penalty, bias, activity
        clone = type(layer).from_config(layer.get_config())
        clone(V)
        assert clone.seed == 5
        assert all(w.constraint is not None for w in clone.trainable_weights)
        return
    if kind == "attention":
        layer = keras_attn.Attention(
            score="additive",
            units=4,
            kernel_constraint=nonneg,
            bias_constraint=nonneg,
            bias_regularizer="l2",
            activity_regularizer="l2",
        )
    else:
        layer = keras_attn.MultiHeadPositional(
            2,
            2,
            position=None,
            kernel_constraint=nonneg,
            bias_constraint=nonneg,
            bias_regularizer="l2",
            activity_regularizer="l2",
        )
    layer(Q, V)
    assert all(w.constraint is not None for w in layer.trainable_weights)
    # the bias regularizer and the activity regularizer add losses
    assert len(layer.losses) >= 2
    config = layer.get_config()
    assert config["kernel_constraint"]["class_name"] == "NonNeg"
    clone = type(layer).from_config(config)
    clone(Q, V)
    assert all(w.constraint is not None for w in clone.trainable_weights)


def keras_mha_and_ours(num_heads=2, key_dim=3):
    theirs = keras.layers.MultiHeadAttention(num_heads, key_dim)
    ours = keras_attn.MultiHeadPositional(num_heads, key_dim, position=None)
    theirs(Q, V), ours(Q, V)
    ours.set_weights(theirs.get_weights())
    return ours, theirs


def test_attention_mask_without_batch_axis_broadcasts_like_keras():
    ours, theirs = keras_mha_and_ours()
    mask = RNG.random((3, 5)) > 0.3
    mask[:, 0] = True  # every query keeps a key (Keras has no zero rows)
    got, w = ours(Q, V, attention_mask=mask, return_attention_scores=True)
    want = theirs(Q, V, attention_mask=np.broadcast_to(mask, (2, 3, 5)))
    np.testing.assert_allclose(to_numpy(got), to_numpy(want), atol=1e-5)
    assert np.all(to_numpy(w)[..., ~mask] == 0)


def test_per_head_attention_masks():
    ours, theirs = keras_mha_and_ours()
    mask = RNG.random((2, 2, 3, 5)) > 0.4
    mask[..., 0] = True
    got, w = ours(Q, V, attention_mask=mask, return_attention_scores=True)
    w = to_numpy(w)
    assert np.all(w[~mask] == 0)
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
    # per head, the weights are the softmax over that head's own keys
    _, w_all = ours(Q, V, return_attention_scores=True)
    logits = np.log(to_numpy(w_all))
    ref = np.where(mask, np.exp(logits), 0.0)
    np.testing.assert_allclose(w, ref / ref.sum(-1, keepdims=True), atol=1e-5)
    with pytest.raises(
        ValueError, match=r"attention_mask.shape=\(2, 3, 3, 5\)"
    ):
        ours(Q, V, attention_mask=np.ones((2, 3, 3, 5), bool))


def test_use_gate_equals_keras_mha_with_use_gate():
    theirs = keras.layers.MultiHeadAttention(2, 3, use_gate=True)
    ours = keras_attn.MultiHeadPositional(2, 3, position=None, use_gate=True)
    theirs(Q, V), ours(Q, V)
    assert [w.shape for w in ours.weights] == [w.shape for w in theirs.weights]
    ours.set_weights(theirs.get_weights())
    np.testing.assert_allclose(
        to_numpy(ours(Q, V)), to_numpy(theirs(Q, V)), atol=1e-5
    )
    assert ours.get_config()["use_gate"] is True


def test_compute_attention_is_the_subclassing_hook():
    seen = {}

    class Silent(keras_attn.MultiHeadPositional):
        def _compute_attention(self, query, key, value, *args, **kwargs):
            seen["shapes"] = tuple(query.shape), tuple(value.shape)
            context, weights = super()._compute_attention(
                query, key, value, *args, **kwargs
            )
            return context * 0.0, weights

    layer = Silent(2, 3, value_dim=5, position=None)
    out = to_numpy(layer(Q, V))
    assert seen["shapes"] == ((2, 3, 2, 3), (2, 5, 2, 5))
    bias = to_numpy(layer.output_bias)
    np.testing.assert_allclose(out, np.broadcast_to(bias, out.shape))


def test_flash_attention_rules_follow_keras():
    with pytest.raises(ValueError, match="Dropout is not supported"):
        keras_attn.MultiHeadPositional(2, 2, dropout=0.1, flash_attention=True)
    layer = keras_attn.MultiHeadPositional(2, 2, flash_attention=True)
    with pytest.raises(ValueError, match="Returning attention scores"):
        layer(Q, V, return_attention_scores=True)
    off = keras_attn.MultiHeadPositional(2, 2, position=None)
    off(Q, V)
    explicit = keras_attn.MultiHeadPositional(
        2, 2, position=None, flash_attention=False
    )
    explicit(Q, V)
    explicit.set_weights(off.get_weights())
    np.testing.assert_allclose(
        to_numpy(explicit(Q, V)), to_numpy(off(Q, V)), atol=1e-5
    )


@pytest.mark.parametrize("output_shape", [6, (6,), (2, 3)])
def test_output_shape_like_keras(output_shape):
    theirs = keras.layers.MultiHeadAttention(2, 3, output_shape=output_shape)
    ours = keras_attn.MultiHeadPositional(
        2, 3, position=None, output_shape=output_shape
    )
    want = theirs(Q, V)
    ours(Q, V)
    ours.set_weights(theirs.get_weights())
    qm = np.array([[1, 1, 0], [1, 1, 1]], bool)
    got = to_numpy(ours(Q, V, query_mask=qm))
    np.testing.assert_allclose(got[qm], to_numpy(want)[qm], atol=1e-5)
    assert np.all(got[~qm] == 0)  # a masked query row is zeros
    assert ours.compute_output_shape(Q.shape, V.shape) == tuple(got.shape)
    clone = keras_attn.MultiHeadPositional.from_config(ours.get_config())
    assert tuple(to_numpy(clone(Q, V)).shape) == tuple(got.shape)
    with pytest.raises(ValueError, match="not both"):
        keras_attn.MultiHeadPositional(2, 3, output_dim=4, output_shape=4)
    with pytest.raises(ValueError, match=r"output_shape=\(2, 0\)"):
        keras_attn.MultiHeadPositional(2, 3, output_shape=(2, 0))


@pytest.mark.parametrize("causal", [False, True])
def test_sliding_window_equals_keras_mha(causal):
    x = RNG.normal(size=(2, 7, 4)).astype("float32")
    theirs = keras.layers.MultiHeadAttention(2, 3, sliding_window=3)
    ours = keras_attn.MultiHeadPositional(2, 3, position=None, sliding_window=3)
    theirs(x, x), ours(x, x)
    ours.set_weights(theirs.get_weights())
    got, w = ours(x, x, use_causal_mask=causal, return_attention_scores=True)
    want = theirs(x, x, use_causal_mask=causal)
    np.testing.assert_allclose(to_numpy(got), to_numpy(want), atol=1e-5)
    i, j = np.indices((7, 7))
    outside = np.abs(i - j) >= 3
    if causal:
        outside |= j > i
    assert np.all(to_numpy(w)[..., outside] == 0)
    assert np.all(to_numpy(w)[..., ~outside] > 0)
    assert ours.get_config()["sliding_window"] == 3
    with pytest.raises(ValueError, match="sliding_window=0"):
        keras_attn.MultiHeadPositional(2, 3, sliding_window=0)


def test_sliding_window_cache_equals_the_full_pass():
    x = RNG.normal(size=(2, 7, 4)).astype("float32")
    layer = keras_attn.MultiHeadPositional(2, 3, sliding_window=2)
    full = to_numpy(layer(x, use_causal_mask=True))
    cache = layer.empty_cache(2, 7)
    for t in range(7):
        out, cache = layer(x[:, t : t + 1], cache=cache, cache_update_index=t)
        np.testing.assert_allclose(to_numpy(out)[:, 0], full[:, t], atol=1e-5)


@pytest.mark.parametrize("score", ["dot", "general", "additive"])
def test_attention_takes_keras_list_convention(score):
    """`layer([q, v(, k)], mask=[qm, vm])`, as keras.layers.Attention."""
    layer = keras_attn.Attention(score=score, units=3)
    k = RNG.normal(size=(2, 5, 4)).astype("float32")
    qm = np.array([[1, 1, 0], [1, 1, 1]], bool)
    vm = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    want = to_numpy(layer(Q, V, key=k, query_mask=qm, value_mask=vm))
    got = to_numpy(layer([Q, V, k], mask=[qm, vm]))
    np.testing.assert_allclose(got, want, atol=1e-6)
    plain = to_numpy(layer(Q, V))
    np.testing.assert_allclose(to_numpy(layer([Q, V])), plain, atol=1e-6)
    assert layer.compute_output_shape([(2, 3, 4), (2, 5, 6)]) == (2, 3, 6)
    with pytest.raises(ValueError, match=r"\[query, value\].*inputs="):
        layer([Q])


def test_attention_list_convention_carries_keras_masks():
    tokens_q = keras.Input((3,), dtype="int32")
    tokens_v = keras.Input((5,), dtype="int32")
    embed = keras.layers.Embedding(10, 4, mask_zero=True)
    q, v = embed(tokens_q), embed(tokens_v)
    out = keras_attn.Attention()([q, v])
    assert out._keras_mask is not None  # the query's mask, as Keras's
    model = keras.Model([tokens_q, tokens_v], out)
    ids_q = np.array([[1, 2, 0], [3, 4, 5]])
    ids_v = np.array([[1, 2, 3, 0, 0], [1, 2, 3, 4, 5]])
    got = to_numpy(model([ids_q, ids_v]))
    e_q, e_v = to_numpy(embed(ids_q)), to_numpy(embed(ids_v))
    want = to_numpy(
        keras_attn.Attention()(
            e_q, e_v, query_mask=ids_q != 0, value_mask=ids_v != 0
        )
    )
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert np.all(got[0, 2] == 0.0)  # padded query row


ND_CASES = [  # query dims, value dims, attention_axes (Keras's own cases)
    ((3, 4), (3, 2), (2,)),
    ((3, 4), (3, 2), (1, 2)),
    ((5, 3, 4), (5, 3, 2), (2, 3)),
    ((3, 8), (3, 8), -2),
    ((4, 2, 3), (1, 1, 5), None),
]


def mhp_and_keras_mha(axes, **kwargs):
    ours = keras_attn.MultiHeadPositional(
        2, 2, position=None, attention_axes=axes, **kwargs
    )
    theirs = keras.layers.MultiHeadAttention(
        2, 2, attention_axes=axes, **kwargs
    )
    return ours, theirs


@pytest.mark.parametrize("q_dims, v_dims, axes", ND_CASES)
def test_attention_axes_equal_keras_mha_on_nd_inputs(q_dims, v_dims, axes):
    q = RNG.normal(size=(3, *q_dims, 8)).astype("float32")
    v = RNG.normal(size=(3, *v_dims, 8)).astype("float32")
    ours, theirs = mhp_and_keras_mha(axes, use_gate=True)
    want, want_scores = theirs(q, v, return_attention_scores=True)
    ours(q, v)
    ours.set_weights(theirs.get_weights())
    got, scores = ours(q, v, return_attention_scores=True)
    assert tuple(got.shape) == tuple(want.shape) == q.shape
    assert tuple(scores.shape) == tuple(want_scores.shape)
    np.testing.assert_allclose(to_numpy(got), to_numpy(want), atol=1e-5)
    np.testing.assert_allclose(
        to_numpy(scores), to_numpy(want_scores), atol=1e-6
    )
    assert ours.compute_output_shape(q.shape, v.shape) == q.shape


def test_attention_axes_masks_and_causality_like_keras_mha():
    q = RNG.normal(size=(3, 3, 4, 8)).astype("float32")
    v = RNG.normal(size=(3, 3, 2, 8)).astype("float32")
    mask = RNG.random((3, 4, 2)) > 0.3  # (B, Tq, Tv): broadcast over axis 1
    mask[..., 0] = True
    ours, theirs = mhp_and_keras_mha((2,))
    theirs(q, v)
    ours(q, v)
    ours.set_weights(theirs.get_weights())
    np.testing.assert_allclose(
        to_numpy(ours(q, v, attention_mask=mask)),
        to_numpy(theirs(q, v, attention_mask=mask)),
        atol=1e-5,
    )
    x = RNG.normal(size=(1, 5, 3, 8)).astype("float32")
    ours, theirs = mhp_and_keras_mha(1)
    want = theirs(x, x, use_causal_mask=True, return_attention_scores=True)
    ours(x, x)
    ours.set_weights(theirs.get_weights())
    got = ours(x, x, use_causal_mask=True, return_attention_scores=True)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(to_numpy(a), to_numpy(b), atol=1e-5)
    future = np.triu(np.ones((5, 5), bool), k=1)
    assert np.all(to_numpy(got[1])[..., future] == 0.0)


def test_attention_axes_padding_invariance_and_zero_rows():
    # Padded key positions along the attention axis change nothing; a
    # slice whose keys are all padded gives zeros (our guarantee).
    layer = keras_attn.MultiHeadPositional(2, 4, attention_axes=2)
    q = RNG.normal(size=(2, 3, 4, 8)).astype("float32")
    v = RNG.normal(size=(2, 3, 6, 8)).astype("float32")
    value_mask = np.ones((2, 3, 6), bool)
    value_mask[:, :, 4:] = False
    value_mask[1, 2] = False  # no key at all in this slice
    out = to_numpy(layer(q, v, value_mask=value_mask))
    v2 = v.copy()
    v2[:, :, 4:] = 1e3
    again = to_numpy(layer(q, v2, value_mask=value_mask))
    np.testing.assert_allclose(out, again, atol=1e-5)
    assert np.all(out[1, 2] == 0.0) and np.all(np.isfinite(out))
    short = to_numpy(layer(q, v[:, :, :4]))
    np.testing.assert_allclose(out[0], short[0], atol=1e-5)


def test_attention_axes_serialize_and_bad_axes_name_the_argument(tmp_path):
    inputs = keras.Input((3, 4, 8))
    layer = keras_attn.MultiHeadPositional(
        2, 2, position=None, attention_axes=-2
    )
    out, scores = layer(inputs, inputs, return_attention_scores=True)
    assert tuple(scores.shape) == (None, 3, 2, 4, 4)
    model = keras.Model(inputs, out)
    path = str(tmp_path / "m.keras")
    model.save(path)
    again = keras.models.load_model(path)
    x = RNG.normal(size=(2, 3, 4, 8)).astype("float32")
    np.testing.assert_allclose(
        to_numpy(again(x)), to_numpy(model(x)), atol=1e-6
    )
    assert again.layers[-1].get_config()["attention_axes"] == (-2,)
    with pytest.raises(ValueError, match=r"attention_axes=\(3,\)"):
        keras_attn.MultiHeadPositional(2, 2, attention_axes=3)(x, x)
    with pytest.raises(ValueError, match="attention_axes=0"):
        keras_attn.MultiHeadPositional(2, 2, attention_axes=0)
    with pytest.raises(ValueError, match="position='sinusoidal'"):
        keras_attn.MultiHeadPositional(2, 2, attention_axes=(1, 2))(x, x)
    with pytest.raises(ValueError, match="cache"):
        keras_attn.MultiHeadPositional(2, 2, position=None)(
            x, cache=np.zeros((2, 2, 4, 2, 2), "float32")
        )


@pytest.mark.parametrize("score", ["dot", "general", "additive"])
def test_attention_nd_inputs_batch_the_leading_axes_like_keras(score):
    q = RNG.normal(size=(2, 3, 5, 4)).astype("float32")
    v = RNG.normal(size=(2, 3, 6, 4)).astype("float32")
    value_mask = RNG.random((2, 3, 6)) > 0.3
    value_mask[..., 0] = True
    units = {} if score == "dot" else {"units": 4}
    layer = keras_attn.Attention(score=score, **units)
    out, scores = layer(
        q, v, value_mask=value_mask, return_attention_scores=True
    )
    assert tuple(out.shape) == (2, 3, 5, 4)
    assert tuple(scores.shape) == (2, 3, 5, 6)
    for i in range(3):  # each slice of axis 1 is its own attention
        o, s = layer(
            q[:, i],
            v[:, i],
            value_mask=value_mask[:, i],
            return_attention_scores=True,
        )
        np.testing.assert_allclose(to_numpy(out)[:, i], to_numpy(o), atol=1e-6)
        np.testing.assert_allclose(
            to_numpy(scores)[:, i], to_numpy(s), atol=1e-6
        )
    if score == "dot":  # Keras's Attention takes no N-D masks (3.15.1)
        want = keras.layers.Attention()([q, v], return_attention_scores=True)
        got = layer(q, v, return_attention_scores=True)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(to_numpy(a), to_numpy(b), atol=1e-5)
    inputs = [keras.Input((3, 5, 4)), keras.Input((3, 6, 4))]
    symbolic = layer(*inputs, return_attention_scores=True)
    assert tuple(symbolic[1].shape) == (None, 3, 5, 6)


@pytest.mark.parametrize("kind", ["mhp", "attention", "ssa"])
def test_no_warning_with_keras_masks(kind):
    # Keras's own MHA test: masked inputs reach the projections without a
    # "will destroy the mask information" warning.
    import warnings

    query = np.array([[1, 2, 3, 0, 0], [3, 3, 1, 1, 2], [1, 0, 0, 0, 0]])
    value = np.array([[5, 4, 0], [3, 0, 0], [2, 1, 1]])
    masked_query = keras.layers.Embedding(4, 8, mask_zero=True)(query)
    masked_value = keras.layers.Embedding(6, 8, mask_zero=True)(value)
    with warnings.catch_warnings(record=True) as logs:
        warnings.simplefilter("always")
        if kind == "mhp":
            layer = keras_attn.MultiHeadPositional(2, 2, use_gate=True)
            layer(masked_query, masked_value)
        elif kind == "attention":
            keras_attn.Attention(score="general")(masked_query, masked_value)
        else:
            keras_attn.StructuredSelfAttention(4, 2)(masked_query)
    assert [str(w.message) for w in logs] == []


def test_keras_private_attributes_and_output_shape_errors():
    layer = keras_attn.MultiHeadPositional(
        2, 4, value_dim=None, sliding_window=5, attention_axes=-2
    )
    again = keras_attn.MultiHeadPositional.from_config(layer.get_config())
    assert (again._num_heads, again._key_dim, again._value_dim) == (2, 4, 4)
    assert again._sliding_window == 5 and again._attention_axes == (-2,)
    for bad in (8.0, 0, (4, -1), "8"):
        with pytest.raises(ValueError, match="Invalid `output_shape`"):
            keras_attn.MultiHeadPositional(2, 16, output_shape=bad)


@pytest.mark.parametrize("use_scale", [False, True])
def test_concat_score_equals_keras_attention_concat(use_scale):
    ours = keras_attn.Attention(score="concat", use_scale=use_scale)
    theirs = keras.layers.Attention(score_mode="concat", use_scale=use_scale)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    ours(Q, V), theirs([Q, V])
    assert [w.name for w in ours.weights] == [w.name for w in theirs.weights]
    values = [np.float32(0.7), np.float32(1.9)][-len(theirs.weights) :]
    for layer in (ours, theirs):
        layer.set_weights(values)
    got = ours(Q, V, value_mask=mask, return_attention_scores=True)
    want = theirs([Q, V], mask=[None, mask], return_attention_scores=True)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(to_numpy(a), to_numpy(b), atol=1e-5)
    with pytest.raises(ValueError, match="same width"):
        keras_attn.Attention(score="concat")(Q, V[..., :3])


def test_keras_list_convention_errors_name_what_was_given():
    layer = keras_attn.Attention()
    with pytest.raises(ValueError, match="must be called.*length 2 or 3"):
        layer([Q, V, V, V])
    with pytest.raises(ValueError, match="mask must be a list"):
        layer([Q, V], mask=np.ones((2, 3), bool))  # not silently mask[0]
    with pytest.raises(ValueError, match="length 2 or 3"):
        layer([Q, V], mask=[np.ones((2, 3), bool)])


def test_keras_score_mode_and_private_helpers():
    layer = keras_attn.Attention(score_mode="concat", use_scale=True)
    assert layer.score == "concat"
    assert keras_attn.Attention.from_config(layer.get_config()).score == (
        "concat"
    )
    with pytest.raises(ValueError, match="score_mode='bad'"):
        keras_attn.Attention(score_mode="bad")
    with pytest.raises(ValueError, match="not both"):
        keras_attn.Attention(score="general", score_mode="dot")
    dot = keras_attn.Attention(use_scale=True)
    dot.build(input_shape=[Q.shape, V.shape])  # Keras's keyword
    assert dot.built and dot.scale is not None
    dot.scale.assign(2.0)
    np.testing.assert_allclose(
        to_numpy(dot._calculate_scores(Q, V)),
        2.0 * np.einsum("bqd,bkd->bqk", Q, V),
        rtol=1e-5,
    )
    v_mask = np.array([[True, False, True, False, True]])
    got = dot._calculate_score_mask(np.zeros((1, 3, 5)), v_mask, True)
    want = np.tril(np.ones((3, 5), bool))[None] & v_mask[:, None, :]
    np.testing.assert_array_equal(to_numpy(got), want)
    assert dot._calculate_score_mask(np.zeros((1, 3, 5)), None, False) is None
