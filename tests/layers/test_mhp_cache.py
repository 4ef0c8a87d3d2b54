"""`MultiHeadPositional` incremental decoding: the key/value cache gives
the outputs of the full causal pass, positions continuing at the right
index; a precomputed memory gives the full cross-attention. Runs on every
backend (`tests/test_backends.py`)."""

import numpy as np
import pytest
from keras import ops

from keras_attn import MultiHeadPositional
from tests.backend import to_numpy

RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 7, 8)).astype("float32")
MEMORY = RNG.normal(size=(2, 5, 6)).astype("float32")
MEMORY_MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)

CONFIGS = [
    {"position": "sinusoidal"},
    {"position": "learned", "max_length": 16},
    {"position": None, "feed_forward": "concat"},
    {"position": "sinusoidal", "feed_forward": "per_head", "use_gate": True},
]


@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("chunk", [1, 3])
def test_self_attention_cache_equals_the_causal_pass(config, chunk):
    layer = MultiHeadPositional(num_heads=2, key_dim=4, **config)
    full = to_numpy(layer(X, use_causal_mask=True))
    cache = layer.empty_cache(2, X.shape[1])
    outs = []
    for start in range(0, X.shape[1], chunk):
        step = X[:, start : start + chunk]
        out, cache = layer(
            step,
            cache=cache,
            cache_update_index=ops.convert_to_tensor(start),
            use_causal_mask=True,
        )
        outs.append(to_numpy(out))
    np.testing.assert_allclose(np.concatenate(outs, 1), full, atol=1e-5)
    # The cache holds the projected keys of every position.
    assert tuple(cache.shape) == (2, 2, X.shape[1], 2, 4)


def test_cache_positions_continue_from_the_index():
    # A mutation that restarts positions at 0 for each step fails here:
    # the same token at step 3 must see position 3.
    layer = MultiHeadPositional(num_heads=2, key_dim=4, position="sinusoidal")
    full = to_numpy(layer(X, use_causal_mask=True))
    cache = layer.empty_cache(2, X.shape[1])
    for t in range(4):
        out, cache = layer(X[:, t : t + 1], cache=cache, cache_update_index=t)
    np.testing.assert_allclose(to_numpy(out)[:, 0], full[:, 3], atol=1e-5)
    stale, _ = layer(X[:, 3:4], cache=cache, cache_update_index=0)
    assert not np.allclose(to_numpy(stale)[:, 0], full[:, 3], atol=1e-3)


@pytest.mark.parametrize("config", CONFIGS[:2], ids=str)
def test_cross_attention_memory_equals_the_full_call(config):
    layer = MultiHeadPositional(num_heads=2, key_dim=4, **config)
    full = to_numpy(layer(X, MEMORY, value_mask=MEMORY_MASK))
    memory = layer.compute_cache(MEMORY)
    outs = []
    for t in range(X.shape[1]):
        out, _ = layer(
            X[:, t : t + 1],
            cache=memory,
            value_mask=MEMORY_MASK,
            start_index=ops.convert_to_tensor(t),
        )
        outs.append(to_numpy(out))
    np.testing.assert_allclose(np.concatenate(outs, 1), full, atol=1e-5)
    np.testing.assert_allclose(
        to_numpy(layer(X, cache=memory, value_mask=MEMORY_MASK)[0]),
        full,
        atol=1e-5,
    )


def test_padded_memory_is_ignored_with_a_cache():
    layer = MultiHeadPositional(num_heads=2, key_dim=4, position=None)
    layer(X, MEMORY)
    memory = layer.compute_cache(MEMORY)
    noisy = np.array(to_numpy(memory))
    noisy[0, :, 3:] = 99.0  # padded positions of example 0
    a = to_numpy(layer(X, cache=memory, value_mask=MEMORY_MASK)[0])
    b = to_numpy(layer(X, cache=noisy, value_mask=MEMORY_MASK)[0])
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_bad_cache_arguments_are_named():
    layer = MultiHeadPositional(num_heads=2, key_dim=4)
    layer(X)
    with pytest.raises(ValueError, match="cache_update_index=3"):
        layer(X, cache_update_index=3)
    with pytest.raises(ValueError, match="start_index=2"):
        layer(X, start_index=2)
    wide = MultiHeadPositional(num_heads=2, key_dim=4, value_dim=3)
    wide(X)
    with pytest.raises(ValueError, match="value_dim=3"):
        wide.empty_cache(2, 5)


@pytest.mark.parametrize("causal", [False, True])
def test_cache_honours_attention_mask_of_a_padded_prompt(causal):
    # A left-padded prompt run through the cache, as KerasHub's generation
    # does: the mask must mean what it means in the full pass (0.2.0
    # ignored it with a cache: outputs off by up to 0.3).
    layer = MultiHeadPositional(
        num_heads=2, key_dim=4, position="learned", max_length=8
    )
    x = X[:, :5]
    pad = np.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]], bool)
    mask = pad[:, None, :] & np.ones((2, 5, 5), bool)
    full = to_numpy(layer(x, x, attention_mask=mask, use_causal_mask=causal))
    out, _ = layer(
        x,
        x,
        cache=layer.empty_cache(2, 5),
        cache_update_index=0,
        attention_mask=mask,
        use_causal_mask=causal,
    )
    np.testing.assert_allclose(to_numpy(out), full, atol=1e-5)


def test_cache_takes_the_prompt_padding_from_its_keras_mask():
    layer = MultiHeadPositional(num_heads=2, key_dim=4)
    x = X[:, :5]
    pad = np.array([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]], bool)
    full = to_numpy(layer(x, query_mask=pad, use_causal_mask=True))
    out, _ = layer(
        x,
        query_mask=pad,
        cache=layer.empty_cache(2, 5),
        cache_update_index=0,
        use_causal_mask=True,
    )
    np.testing.assert_allclose(to_numpy(out), full, atol=1e-5)


@pytest.mark.parametrize("chunk", [2, 7])
def test_cache_with_a_value_mask_equals_the_full_pass(chunk):
    # Self-attention with query and value masks that differ: through the
    # cache, a chunk's keys and values are masked by the value mask at the
    # chunk's positions (its slice), as in the full pass; never by the
    # query mask.
    layer = MultiHeadPositional(num_heads=2, key_dim=4)
    qm = np.array([[1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1]], bool)
    vm = np.array([[0, 1, 1, 1, 1, 1, 0], [1, 1, 0, 1, 1, 1, 1]], bool)
    full = to_numpy(
        layer(X, query_mask=qm, value_mask=vm, use_causal_mask=True)
    )
    cache, outs = layer.empty_cache(2, 7), []
    for start in range(0, 7, chunk):
        out, cache = layer(
            X[:, start : start + chunk],
            query_mask=qm[:, start : start + chunk],
            value_mask=vm,
            cache=cache,
            cache_update_index=start,
            use_causal_mask=True,
        )
        outs.append(to_numpy(out))
    np.testing.assert_allclose(np.concatenate(outs, 1), full, atol=1e-5)
