"""`decode_rows`: one step a row, each row at its own position, over a
cache the call only reads, equals the full causal pass at that position
(and the cache's write-in-place step), whatever the later slots hold;
`CausalLM.decode_rows` equals the model's logits. Runs on every backend
(`tests/test_backends.py`)."""

import numpy as np
import pytest

from keras_attn import MultiHeadPositional
from tests.backend import to_numpy

RNG = np.random.default_rng(3)
ROWS, LENGTH, SLOTS = 3, 9, 12
X = RNG.normal(size=(ROWS, LENGTH, 16)).astype("float32")
POSITIONS = np.array([0, 8, 4], "int32")  # the first row: no earlier key

CONFIGS = [
    {"position": "rotary", "num_key_value_heads": 2},
    {"position": "alibi", "num_key_value_heads": 1},
    {"position": "learned", "max_length": 16},
    {"position": "sinusoidal", "feed_forward": "per_head", "use_gate": True},
    {"position": None, "feed_forward": "concat", "num_key_value_heads": 2},
    {"position": "rotary", "sliding_window": 3},
]


def _layer(config):
    layer = MultiHeadPositional(num_heads=4, key_dim=4, **config)
    layer(X, use_causal_mask=True)
    return layer


def _cache_of(layer):
    """The keys and values of every step of `X`, `(R, H_kv, SLOTS, K)`
    each, with the slots from each row's position on filled with values
    a wrong read would show."""
    cache = layer.empty_cache(ROWS, SLOTS)
    _, cache = layer(X, cache=cache, cache_update_index=0, use_causal_mask=True)
    cache = np.array(to_numpy(cache)).transpose(0, 1, 3, 2, 4)
    keys, values = cache[:, 0].copy(), cache[:, 1].copy()  # (R, H, S, K)
    for row, position in enumerate(POSITIONS):
        keys[row, :, position:] = 1e3
        values[row, :, position:] = -1e3
    return keys, values


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_a_row_at_its_position_is_the_causal_pass_there(config):
    layer = _layer(config)
    full = to_numpy(layer(X, use_causal_mask=True))
    keys, values = _cache_of(layer)
    query = X[np.arange(ROWS), POSITIONS][:, None]
    out, key, value = layer.decode_rows(query, keys, values, POSITIONS)
    want = full[np.arange(ROWS), POSITIONS]
    np.testing.assert_allclose(to_numpy(out)[:, 0], want, atol=2e-5)
    # The new key and value are those the cache's own step writes there.
    cache = layer.empty_cache(ROWS, SLOTS)
    _, written = layer(
        X, cache=cache, cache_update_index=0, use_causal_mask=True
    )
    written = to_numpy(written)[np.arange(ROWS), :, POSITIONS]  # (R, 2, H, K)
    np.testing.assert_allclose(to_numpy(key)[:, 0], written[:, 0], atol=2e-5)
    np.testing.assert_allclose(to_numpy(value)[:, 0], written[:, 1], atol=2e-5)


def test_a_row_does_not_see_the_others():
    layer = _layer(CONFIGS[0])
    keys, values = _cache_of(layer)
    query = X[np.arange(ROWS), POSITIONS][:, None]
    out, _, _ = layer.decode_rows(query, keys, values, POSITIONS)
    for row in range(ROWS):
        alone, _, _ = layer.decode_rows(
            query[row : row + 1],
            keys[row : row + 1],
            values[row : row + 1],
            POSITIONS[row : row + 1],
        )
        np.testing.assert_allclose(
            to_numpy(alone)[0], to_numpy(out)[row], atol=1e-6
        )


def test_the_model_decodes_rows_as_its_full_pass():
    from keras_attn.models import CausalLM

    lm = CausalLM(
        40, num_layers=2, num_heads=4, hidden_dim=16, intermediate_dim=32,
        num_key_value_heads=2,
    )  # fmt: skip
    ids = RNG.integers(1, 40, (ROWS, LENGTH)).astype("int32")
    full = to_numpy(lm(ids))
    _, cache = lm.call_with_cache(ids, lm.empty_cache(ROWS, SLOTS), 0)
    caches = []
    for layer_cache in cache:
        layer_cache = np.array(to_numpy(layer_cache)).transpose(0, 1, 3, 2, 4)
        keys, values = layer_cache[:, 0].copy(), layer_cache[:, 1].copy()
        for row, position in enumerate(POSITIONS):
            keys[row, :, position:], values[row, :, position:] = 7.0, -7.0
        caches.append((keys, values))
    tokens = ids[np.arange(ROWS), POSITIONS]
    logits, entries = lm.decode_rows(tokens, caches, POSITIONS)
    want = full[np.arange(ROWS), POSITIONS]
    np.testing.assert_allclose(to_numpy(logits), want, atol=5e-5)
    assert len(entries) == 2
    assert tuple(entries[0][0].shape) == (ROWS, 1, 2, 4)


@pytest.mark.parametrize(
    "query, keys, positions, message",
    [
        ((3, 2, 16), (3, 4, 12, 4), (3,), "one step a row"),
        ((3, 1, 16), (3, 2, 12, 4), (3,), r"key_cache of shape \(rows, 4,"),
        ((3, 1, 16), (3, 4, 12, 4), (3, 1), "a position a row"),
    ],
)  # fmt: skip
def test_wrong_shapes_are_refused_by_name(query, keys, positions, message):
    layer = _layer({"position": "rotary"})
    with pytest.raises(ValueError, match=message):
        layer.decode_rows(
            np.zeros(query, "float32"),
            np.zeros(keys, "float32"),
            np.zeros(keys, "float32"),
            np.zeros(positions, "int32"),
        )


def test_a_cache_policy_is_refused_by_name():
    from keras_attn.layers.cache_policies import SlidingWindowCache

    layer = MultiHeadPositional(
        num_heads=2, key_dim=4, cache_policy=SlidingWindowCache(4)
    )
    layer(X)
    with pytest.raises(ValueError, match="cache_policy="):
        layer.decode_rows(
            X[:, :1],
            np.zeros((ROWS, 2, 8, 4), "float32"),
            np.zeros((ROWS, 2, 8, 4), "float32"),
            POSITIONS,
        )
