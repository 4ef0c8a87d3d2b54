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


# A cache_update_index a row: rows at different positions in one call (a
# server's rows, each its own request). Each row must get what it gets
# alone, with one index.
ROW_CONFIGS = [
    {"position": "rotary"},
    {"position": "alibi"},
    {"position": "sinusoidal", "num_key_value_heads": 1},
    {"position": "learned", "max_length": 16},
    {"position": None, "feed_forward": "concat"},
]


def _rows_alone_and_together(layer, prompts, chunk, length=12):
    """Each prompt's cache alone, then `chunk` steps at its own position:
    `(outputs alone, caches alone, outputs together, cache together)`."""
    steps = RNG.normal(size=(len(prompts), chunk, 8)).astype("float32")
    outs, caches, after = [], [], []
    for row, prompt in enumerate(prompts):
        cache = layer.empty_cache(1, length)
        if len(prompt):
            _, cache = layer(
                prompt[None],
                cache=cache,
                cache_update_index=0,
                use_causal_mask=True,
            )
        caches.append(to_numpy(cache))
        out, cache = layer(
            steps[row : row + 1],
            cache=cache,
            cache_update_index=len(prompt),
            use_causal_mask=True,
        )
        outs.append(to_numpy(out)[0])
        after.append(to_numpy(cache)[0])
    index = np.array([len(p) for p in prompts], "int32")
    out, cache = layer(
        steps,
        cache=ops.convert_to_tensor(np.concatenate(caches)),
        cache_update_index=ops.convert_to_tensor(index),
        use_causal_mask=True,
    )
    return np.stack(outs), np.stack(after), to_numpy(out), to_numpy(cache)


@pytest.mark.parametrize("config", ROW_CONFIGS, ids=str)
@pytest.mark.parametrize("chunk", [1, 2])
def test_an_index_a_row_gives_each_row_its_answer_alone(config, chunk):
    layer = MultiHeadPositional(num_heads=2, key_dim=4, **config)
    prompts = [X[0, :3], X[1, :6], X[0, :0]]
    alone, alone_cache, together, cache = _rows_alone_and_together(
        layer, prompts, chunk
    )
    np.testing.assert_allclose(together, alone, atol=1e-5)
    # Each row's new keys land at its own positions, and nowhere else.
    np.testing.assert_allclose(cache, alone_cache, atol=1e-5)
    for row, prompt in enumerate(prompts):
        unwritten = cache[row, :, len(prompt) + chunk :]
        assert not unwritten.any(), row


def test_an_index_a_row_masks_each_rows_later_positions():
    # The written slots after a row's position hold another request's
    # keys (a freed row): they must weigh nothing.
    layer = MultiHeadPositional(num_heads=2, key_dim=4, position="rotary")
    clean = layer.empty_cache(2, 10)
    step = X[:, :1]
    index = ops.convert_to_tensor(np.array([2, 5], "int32"))
    out, _ = layer(step, cache=clean, cache_update_index=index)
    dirty = to_numpy(clean).copy()
    dirty[0, :, 3:] = 50.0  # after row 0's position 2
    dirty[1, :, 6:] = -50.0
    again, _ = layer(
        step, cache=ops.convert_to_tensor(dirty), cache_update_index=index
    )
    np.testing.assert_allclose(to_numpy(again), to_numpy(out), atol=1e-6)


def test_an_index_a_row_with_a_cache_policy_is_refused_by_name():
    from keras_attn.layers.cache_policies import SlidingWindowCache

    layer = MultiHeadPositional(
        num_heads=2, key_dim=4, cache_policy=SlidingWindowCache(4)
    )
    cache = layer.empty_cache(2, 8)
    with pytest.raises(ValueError, match="cache_update_index a row"):
        layer(
            X[:, :1],
            cache=cache,
            cache_update_index=ops.convert_to_tensor(np.array([1, 2])),
        )
