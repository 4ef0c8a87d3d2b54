"""Rotary and ALiBi positions, grouped-query heads and a score bias in
`MultiHeadPositional`, against NumPy references written from the formulas
(Su et al. 2021; Press et al. 2022; Ainslie et al. 2023) and against
`keras.layers.GroupQueryAttention` with copied weights. Backend-agnostic
(part of the JAX and PyTorch suite)."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn import MultiHeadPositional
from keras_attn.ops import positional
from tests.references import np_rotary, np_slopes

B, T, D = 2, 7, 12


def data(seed=0, t=T):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(B, t, D)).astype("float32")


def softmax(s, mask):
    s = np.where(mask, s, -np.inf)
    top = np.max(np.where(mask, s, -1e30), axis=-1, keepdims=True)
    e = np.where(mask, np.exp(s - top), 0.0)
    total = e.sum(-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def np_attention(layer, x, mask=None, causal=False, bias=None, start=0):
    """Self-attention of `layer` on `x` from its weights, in float64."""
    w = {v.path.split("/")[-2] + "/" + v.name: v.numpy() for v in layer.weights}
    q = np.einsum("btd,dhk->bthk", x, w["query/kernel"]) + w["query/bias"]
    k = np.einsum("btd,dhk->bthk", x, w["key/kernel"]) + w["key/bias"]
    v = np.einsum("btd,dhk->bthk", x, w["value/kernel"]) + w["value/bias"]
    steps = np.arange(x.shape[1]) + start
    if layer.position == "rotary":
        q = np_rotary(q, steps, layer.max_wavelength, layer.scaling_factor)
        k = np_rotary(k, steps, layer.max_wavelength, layer.scaling_factor)
    groups = layer.num_heads // layer.num_key_value_heads
    k, v = np.repeat(k, groups, axis=2), np.repeat(v, groups, axis=2)
    s = np.einsum("bqhk,bthk->bhqt", q, k) / np.sqrt(layer.key_dim)
    if layer.position == "alibi":
        dist = np.abs(steps[:, None] - steps[None, :])
        s = s - np_slopes(layer.num_heads)[None, :, None, None] * dist
    if bias is not None:
        s = s + bias
    allowed = np.ones(s.shape, bool)
    if mask is not None:
        allowed &= mask[:, None, :, None] & mask[:, None, None, :]
    if causal:
        allowed &= np.tril(np.ones((x.shape[1],) * 2, bool))
    a = softmax(s, allowed)
    o = np.einsum("bhqt,bthk->bqhk", a, v)
    out = np.einsum("bqhk,hkd->bqd", o, w["attention_output/kernel"])
    out = out + w["attention_output/bias"]
    rows = allowed.any(axis=(1, 3))[..., None]
    return np.where(rows, out, 0.0), a


def test_rotary_matches_the_formula_and_depends_on_distance_only():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, 3, 8)).astype("float32")
    pos = np.array([0, 3, 4, 9, 100])
    got = ops.convert_to_numpy(positional.rotary(x, pos, 500.0, 2.0))
    np.testing.assert_allclose(got, np_rotary(x, pos, 500.0, 2.0), atol=1e-5)
    q, k = x[:1, :1], x[1:, :1]
    dots = [
        np.sum(
            ops.convert_to_numpy(positional.rotary(q, [p + 5]))
            * ops.convert_to_numpy(positional.rotary(k, [p]))
        )
        for p in (0, 7, 300)
    ]
    np.testing.assert_allclose(dots, [dots[0]] * 3, rtol=1e-4)


@pytest.mark.parametrize(
    "heads, want",
    [
        (8, [2.0**-i for i in range(1, 9)]),
        (4, [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]),
        # 6 heads: the 4-head slopes, then 2^-1 and 2^-3 from 8 heads.
        (6, [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]),
    ],
)
def test_alibi_slopes_are_the_papers(heads, want):
    np.testing.assert_allclose(positional.alibi_slopes(heads), want)
    np.testing.assert_allclose(np_slopes(heads), want)


MODES = [
    {"position": "rotary"},
    {"position": "alibi"},
    {"position": None, "num_key_value_heads": 1},
    {"position": "rotary", "num_key_value_heads": 2},
    {"position": "alibi", "num_key_value_heads": 2},
]


@pytest.mark.parametrize("kwargs", MODES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_layer_matches_numpy_reference_with_padding(kwargs, causal):
    layer = MultiHeadPositional(4, 6, **kwargs)
    x = data()
    mask = np.ones((B, T), bool)
    mask[1, 5:] = False
    out, scores = layer(
        x,
        query_mask=mask,
        use_causal_mask=causal,
        return_attention_scores=True,
    )
    want, weights = np_attention(layer, x.astype("float64"), mask, causal)
    np.testing.assert_allclose(ops.convert_to_numpy(out), want, atol=2e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(scores), weights, atol=2e-5)
    # The fused path (no scores asked) gives the same output.
    fused = layer(x, query_mask=mask, use_causal_mask=causal)
    np.testing.assert_allclose(ops.convert_to_numpy(fused), want, atol=2e-5)


@pytest.mark.parametrize("kwargs", MODES, ids=str)
def test_cache_equals_the_full_pass(kwargs):
    layer = MultiHeadPositional(4, 6, **kwargs)
    x = data(3)
    full = ops.convert_to_numpy(layer(x, use_causal_mask=True))
    cache = layer.empty_cache(B, T)
    assert tuple(cache.shape) == (B, 2, T, layer.num_key_value_heads, 6)
    out, cache = layer(  # a 3-step prompt, then one step at a time
        x[:, :3], cache=cache, cache_update_index=0, use_causal_mask=True
    )
    steps = [ops.convert_to_numpy(out)]
    for i in range(3, T):
        out, cache = layer(x[:, i : i + 1], cache=cache, cache_update_index=i)
        steps.append(ops.convert_to_numpy(out))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)


def test_grouped_heads_match_keras_group_query_attention():
    x, y = data(4), data(5, t=5)
    ours = MultiHeadPositional(
        6, 4, position=None, num_key_value_heads=2, output_dim=D
    )
    keras_gqa = keras.layers.GroupQueryAttention(
        head_dim=4, num_query_heads=6, num_key_value_heads=2
    )
    ours(x, y)
    keras_gqa(x, y)
    assert [w.shape for w in ours.weights] == [
        w.shape for w in keras_gqa.weights
    ]
    ours.set_weights(keras_gqa.get_weights())
    mask = np.ones((B, 5), bool)
    mask[0, 3:] = False
    a, sa = ours(x, y, value_mask=mask, return_attention_scores=True)
    b, sb = keras_gqa(x, y, value_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(*map(ops.convert_to_numpy, (a, b)), atol=1e-5)
    np.testing.assert_allclose(*map(ops.convert_to_numpy, (sa, sb)), atol=1e-6)
    c = ours(x, y, value_mask=mask, use_causal_mask=True)
    d = keras_gqa(x, y, value_mask=mask, use_causal_mask=True)
    np.testing.assert_allclose(*map(ops.convert_to_numpy, (c, d)), atol=1e-5)


@pytest.mark.parametrize(
    "shape", [(1, 4, T, T), (B, 1, T, T), (B, 4, T, T), (T, T)]
)
def test_attention_bias_is_added_to_the_scores(shape):
    layer = MultiHeadPositional(4, 6, position=None)
    x = data(6)
    bias = np.random.default_rng(7).normal(size=shape).astype("float32") * 3
    out, scores = layer(x, attention_bias=bias, return_attention_scores=True)
    want, weights = np_attention(layer, x.astype("float64"), bias=bias)
    np.testing.assert_allclose(ops.convert_to_numpy(out), want, atol=2e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(scores), weights, atol=2e-5)
    fused = layer(x, attention_bias=bias)
    np.testing.assert_allclose(ops.convert_to_numpy(fused), want, atol=2e-5)
    plain = ops.convert_to_numpy(layer(x))
    assert np.abs(plain - want).max() > 1e-2  # the bias does change it


@keras.saving.register_keras_serializable(package="test_positions_heads")
class Relative(MultiHeadPositional):
    """A learned bias per head and clipped distance (T5-like)."""

    def build(self, query_shape, value_shape=None, key_shape=None):
        super().build(query_shape, value_shape, key_shape)
        self.table = self.add_weight(
            shape=(self.num_heads, 9), initializer="random_normal", name="rel"
        )

    def score_bias(self, query_positions, key_positions):
        d = ops.clip(query_positions[:, None] - key_positions[None, :], -4, 4)
        return ops.take(self.table, d + 4, axis=1)[None]  # (1, H, Tq, Tk)


def test_score_bias_hook_learns_and_round_trips(tmp_path):
    inp = keras.Input((T, D))
    layer = Relative(4, 6, position=None)
    model = keras.Model(inp, layer(inp, use_causal_mask=True))
    x = data(8)
    table = layer.table.numpy()
    d = np.clip(np.arange(T)[:, None] - np.arange(T)[None, :], -4, 4)
    bias = table[:, d + 4][None]
    want, _ = np_attention(layer, x.astype("float64"), causal=True, bias=bias)
    np.testing.assert_allclose(ops.convert_to_numpy(model(x)), want, atol=2e-5)
    path = str(tmp_path / "rel.keras")
    model.save(path)
    again = keras.saving.load_model(path)
    np.testing.assert_allclose(
        ops.convert_to_numpy(again(x)),
        ops.convert_to_numpy(model(x)),
        atol=1e-6,
    )


@pytest.mark.parametrize("kwargs", MODES, ids=str)
def test_keras_file_round_trip(kwargs, tmp_path):
    inp = keras.Input((None, D))
    layer = MultiHeadPositional(4, 6, scaling_factor=2.0, **kwargs)
    model = keras.Model(inp, layer(inp, use_causal_mask=True))
    path = str(tmp_path / "m.keras")
    model.save(path)
    again = keras.saving.load_model(path)
    x = data(9, t=11)  # longer than anything seen: no length limit
    np.testing.assert_allclose(
        ops.convert_to_numpy(again(x)),
        ops.convert_to_numpy(model(x)),
        atol=1e-6,
    )
    config = again.layers[1].get_config()
    assert config["num_key_value_heads"] == layer.num_key_value_heads
    assert config["scaling_factor"] == 2.0


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"num_key_value_heads": 3}, "divide num_heads.*num_key_value_heads=3"),
        ({"num_key_value_heads": 0}, "num_key_value_heads"),
        ({"position": "rotary", "key_dim": 5}, "even.*key_dim=5"),
        ({"position": "rotary", "max_wavelength": 0}, "max_wavelength=0"),
        ({"scaling_factor": -1.0}, "scaling_factor=-1.0"),
        ({"position": "relative"}, "position='relative'"),
    ],
)
def test_bad_arguments_are_named(kwargs, needle):
    kwargs = {"num_heads": 4, "key_dim": 6, **kwargs}
    with pytest.raises(ValueError, match=needle):
        MultiHeadPositional(**kwargs)


def test_rotary_and_alibi_refuse_more_than_one_time_axis():
    layer = MultiHeadPositional(2, 4, position="alibi")
    with pytest.raises(ValueError, match="position='alibi' needs inputs"):
        layer(np.zeros((1, 3, 4, 8), "float32"))


def test_cross_attention_memory_with_grouped_heads():
    layer = MultiHeadPositional(4, 6, position="rotary", num_key_value_heads=2)
    x, memory = data(10, t=3), data(11, t=5)
    full = ops.convert_to_numpy(layer(x, memory))
    cache = layer.compute_cache(memory)
    assert tuple(cache.shape) == (B, 2, 5, 2, 6)
    out, _ = layer(x, cache=cache)
    np.testing.assert_allclose(ops.convert_to_numpy(out), full, atol=1e-5)
