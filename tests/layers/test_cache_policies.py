"""Key/value cache policies (`keras_attn.layers.cache_policies`): each
decodes to its full-pass definition, written from the formulas in NumPy
or as the layer's full pass with the policy's mask; step by step and in
chunks, with padding, grouped heads and every position kind, eager and
compiled. Runs on every backend (`tests/test_backends.py`)."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn import MultiHeadPositional
from keras_attn.layers.cache_policies import (
    Int8Cache,
    SinkCache,
    SlidingWindowCache,
)
from tests.backend import to_numpy

RNG = np.random.default_rng(3)
B, T, D = 2, 13, 8
X = RNG.normal(size=(B, T, D)).astype("float32")
# Row 1 is a prompt of 4 steps, right-padded to 6, then decoded.
PADDED = np.ones((B, T), bool)
PADDED[1, 4:6] = False


def allowed(window, sinks=0, length=T):
    """The definition: query `i` may attend to key `j` when
    `j <= i` and (`i - j < window` or `j < sinks`)."""
    i, j = np.arange(length)[:, None], np.arange(length)[None]
    near = np.ones_like(i - j, bool) if window is None else i - j < window
    return (j <= i) & (near | (j < sinks))


def decode(layer, x, chunks, query_mask=None, length=T):
    """Outputs of `x` fed through `layer`'s cache in `chunks` (sizes),
    and the final cache."""
    cache = layer.empty_cache(x.shape[0], length)
    outs, start = [], 0
    for size in chunks:
        mask = (
            None if query_mask is None else query_mask[:, start : start + size]
        )
        out, cache = layer(
            x[:, start : start + size],
            query_mask=mask,
            cache=cache,
            cache_update_index=ops.convert_to_tensor(start),
        )
        outs.append(to_numpy(out))
        start += size
    return np.concatenate(outs, 1), cache


CHUNKS = [[1] * T, [5, 2, 1, 1, 4], [T]]


def fast_or_slow(position, chunks):
    """Rotary positions step by step and ALiBi in chunks in the fast
    tier; every other pair in the slow tier."""
    fast = (position, len(chunks)) in (("rotary", T), ("alibi", 5))
    return pytest.param(
        position, chunks, marks=() if fast else pytest.mark.slow
    )


@pytest.mark.parametrize(
    "position, chunks",
    [
        fast_or_slow(position, chunks)
        for position in ["rotary", "alibi", "sinusoidal", None]
        for chunks in CHUNKS
    ],
)
def test_sliding_window_ring_equals_keras_sliding_window(position, chunks):
    layer = MultiHeadPositional(
        num_heads=4,
        key_dim=4,
        num_key_value_heads=2,
        position=position,
        sliding_window=3,
        cache_policy=SlidingWindowCache(3),
    )
    full = to_numpy(layer(X, use_causal_mask=True))
    out, cache = decode(layer, X, chunks)
    np.testing.assert_allclose(out, full, atol=1e-5)
    # The ring holds 3 positions whatever the length.
    assert [tuple(c.shape) for c in cache] == [(B, 2, 3, 2, 4), (B, 3)]
    np.testing.assert_array_equal(to_numpy(cache[1]), [[12, 10, 11]] * B)


@pytest.mark.parametrize("chunks", CHUNKS[:2], ids=["steps", "chunks"])
def test_sinks_equal_the_full_pass_with_their_mask(chunks):
    layer = MultiHeadPositional(
        num_heads=2, key_dim=4, position="rotary", cache_policy=SinkCache(2, 3)
    )
    full = to_numpy(layer(X, attention_mask=allowed(3, 2)[None]))
    out, cache = decode(layer, X, chunks)
    np.testing.assert_allclose(out, full, atol=1e-5)
    assert tuple(cache[0].shape) == (B, 2, 5, 2, 4)
    # Without the sinks the outputs differ once the window has moved on.
    windowed = to_numpy(layer(X, attention_mask=allowed(3)[None]))
    assert not np.allclose(out[:, 6:], windowed[:, 6:], atol=1e-3)


@pytest.mark.parametrize(
    "policy", [SlidingWindowCache(4), SinkCache(1, 4)], ids=repr
)
def test_padded_steps_are_never_attended_to(policy):
    layer = MultiHeadPositional(num_heads=2, key_dim=4, cache_policy=policy)
    sinks = policy.sinks
    mask = allowed(4, sinks)[None] & PADDED[:, None, :]
    full = to_numpy(layer(X, query_mask=PADDED, attention_mask=mask))
    out, _ = decode(layer, X, [6, 1, 1, 5], query_mask=PADDED)
    np.testing.assert_allclose(out, full, atol=1e-5)
    np.testing.assert_array_equal(out[1, 4:6], 0.0)  # padded rows: zeros


def numpy_attention(layer, x, quantize=False):
    """`MultiHeadPositional(position=None)` from its kernels in NumPy,
    causal; keys and values stored as int8 (`q = round(x / s)`,
    `s = max |x| / 127` a position and head) when `quantize`."""
    w = {
        name: [to_numpy(t) for t in dense.weights]
        for name, dense in (
            ("q", layer.query_dense),
            ("k", layer.key_dense),
            ("v", layer.value_dense),
            ("o", layer.output_dense),
        )
    }
    q = np.einsum("btd,dhk->bthk", x, w["q"][0]) + w["q"][1]
    k = np.einsum("btd,dhk->bthk", x, w["k"][0]) + w["k"][1]
    v = np.einsum("btd,dhk->bthk", x, w["v"][0]) + w["v"][1]
    if quantize:

        def stored(a):
            scale = np.abs(a).max(-1, keepdims=True) / 127
            safe = np.where(scale > 0, scale, 1)
            return np.clip(np.round(a / safe), -127, 127) * scale

        k, v = stored(k), stored(v)
    groups = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, groups, axis=2), np.repeat(v, groups, axis=2)
    scores = np.einsum("bqhk,bthk->bhqt", q / np.sqrt(q.shape[-1]), k)
    scores = np.where(allowed(None, length=x.shape[1]), scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    heads = np.einsum("bhqt,bthk->bqhk", weights, v)
    return np.einsum("bqhk,hkd->bqd", heads, w["o"][0]) + w["o"][1]


def test_int8_cache_equals_its_numpy_definition_and_stays_near_float():
    layer = MultiHeadPositional(
        num_heads=4,
        key_dim=8,
        num_key_value_heads=2,
        position=None,
        cache_policy=Int8Cache(),
    )
    out, cache = decode(layer, X, [5, 1, 1, 6])
    want = numpy_attention(layer, X, quantize=True)
    np.testing.assert_allclose(out, want, atol=1e-5)
    values, scales, positions = (to_numpy(c) for c in cache)
    assert values.dtype == np.int8 and scales.dtype == np.float32
    np.testing.assert_array_equal(positions, [np.arange(T)] * B)
    # Against float keys and values: bounded by the int8 rounding.
    exact = numpy_attention(layer, X)
    error = np.abs(out - exact).max()
    assert 0 < error < 0.01 * np.abs(exact).max(), error


def test_int8_ring_equals_the_int8_window():
    layer = MultiHeadPositional(
        num_heads=2, key_dim=4, position="rotary", cache_policy=Int8Cache(3)
    )
    ring, cache = decode(layer, X, [4, 1, 8])
    assert tuple(cache[0].shape) == (B, 2, 3, 2, 4)
    whole = MultiHeadPositional.from_config(
        {**layer.get_config(), "cache_policy": Int8Cache()}
    )
    whole.build(X.shape)
    whole.set_weights(layer.get_weights())
    cache = whole.empty_cache(B, T)
    # The same int8 keys, all kept, masked to the window: equal outputs.
    outs = []
    for t in range(T):
        out, cache = whole(
            X[:, t : t + 1],
            cache=cache,
            cache_update_index=t,
        )
        outs.append(to_numpy(out))
    full_int8 = np.concatenate(outs, 1)
    np.testing.assert_allclose(ring[:, :3], full_int8[:, :3], atol=1e-5)
    assert not np.allclose(ring[:, 3:], full_int8[:, 3:], atol=1e-4)


def test_cache_memory_is_flat_for_a_window_and_grows_without():
    sizes = {}
    for name, policy in (
        ("full", Int8Cache()),
        ("window", SlidingWindowCache(256)),
        ("sinks", SinkCache(4, 256)),
    ):
        sizes[name] = [
            policy.memory_bytes(1, n, 8, 64, "float32")
            for n in (1024, 8192, 32768)
        ]
    assert sizes["window"][0] == sizes["window"][-1]
    assert sizes["sinks"][0] == sizes["sinks"][-1]
    assert sizes["full"][-1] == 32 * sizes["full"][0]
    layer = MultiHeadPositional(
        num_heads=8, key_dim=64, cache_policy=SlidingWindowCache(256)
    )
    layer.build((1, None, 64))
    cache = layer.empty_cache(1, 32768)
    real = sum(to_numpy(c).nbytes for c in cache)
    assert real == sizes["window"][-1]


def test_a_compiled_decoding_loop_equals_eager():
    layer = MultiHeadPositional(
        num_heads=2,
        key_dim=4,
        position="alibi",
        sliding_window=4,
        cache_policy=SlidingWindowCache(4),
    )
    eager, _ = decode(layer, X, [1] * T)

    def step(x, cache, index):
        return layer(x, cache=cache, cache_update_index=index)

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        step = jax.jit(step)
    elif backend == "tensorflow":
        import tensorflow as tf

        step = tf.function(step, jit_compile=True)
    cache = layer.empty_cache(B, T)
    outs = []
    for t in range(T):
        index = ops.convert_to_tensor(t, "int32")
        out, cache = step(ops.convert_to_tensor(X[:, t : t + 1]), cache, index)
        outs.append(to_numpy(out))
    np.testing.assert_allclose(np.concatenate(outs, 1), eager, atol=1e-5)


def test_policies_round_trip_through_the_layer_config():
    for policy in (SlidingWindowCache(5), SinkCache(2, 6), Int8Cache(7, 1)):
        layer = MultiHeadPositional(num_heads=2, key_dim=4, cache_policy=policy)
        again = MultiHeadPositional.from_config(layer.get_config())
        assert type(again.cache_policy) is type(policy)
        assert again.cache_policy.get_config() == policy.get_config()


def test_bad_policy_arguments_are_named():
    with pytest.raises(ValueError, match="window=0"):
        SlidingWindowCache(0)
    with pytest.raises(ValueError, match="sinks=-1"):
        Int8Cache(4, -1)
    with pytest.raises(ValueError, match="sinks=2, window=None"):
        Int8Cache(None, 2)
    with pytest.raises(ValueError, match="sliding_window=3"):
        MultiHeadPositional(
            num_heads=2,
            key_dim=4,
            sliding_window=3,
            cache_policy=SlidingWindowCache(4),
        )
    with pytest.raises(ValueError, match="cache_policy='ring'"):
        MultiHeadPositional(num_heads=2, key_dim=4, cache_policy="ring")
    layer = MultiHeadPositional(
        num_heads=2, key_dim=4, cache_policy=SlidingWindowCache(4)
    )
    cache = layer.empty_cache(B, T)
    with pytest.raises(ValueError, match="value_mask"):
        layer(
            X[:, :2],
            value_mask=np.ones((B, T), bool),
            cache=cache,
            cache_update_index=0,
        )


def tiny_language_model(policy, window=3, vocabulary=11):
    """Embedding, one `MultiHeadPositional` (`sliding_window=window`) with
    `policy`, logits: `step_fn` for the searches, and its layers."""
    keras.utils.set_random_seed(5)
    embed = keras.layers.Embedding(vocabulary, 8)
    attend = MultiHeadPositional(
        num_heads=2,
        key_dim=4,
        position="rotary",
        sliding_window=window,
        cache_policy=policy,
    )
    logits = keras.layers.Dense(vocabulary)
    logits(attend(embed(np.zeros((1, 2), "int32"))))

    def step_fn(tokens, state, index):
        x = embed(tokens[:, None])
        y, state = attend(x, cache=state, cache_update_index=index)
        return logits(y[:, 0]) * 4.0, state, None

    return step_fn, (embed, attend, logits)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_searches_decode_through_a_ring_as_through_the_full_cache(search):
    from keras_attn import seq2seq

    full_fn, layers = tiny_language_model(None)
    ring_fn, ring_layers = tiny_language_model(SlidingWindowCache(3))
    for a, b in zip(layers, ring_layers, strict=True):
        b.set_weights(a.get_weights())
    found = []
    for fn, attend in ((full_fn, layers[1]), (ring_fn, ring_layers[1])):
        state = attend.empty_cache(3, 12)
        if search == "greedy":
            out = seq2seq.greedy_search(fn, state, 1, 0, 12)
        else:
            out = seq2seq.beam_search(fn, state, 1, 0, 12, beam_width=3)
        found.append(to_numpy(out["ids"]))
    np.testing.assert_array_equal(found[0], found[1])
    assert (found[0] > 0).sum() > 12  # tokens were decoded past the window
