"""`keras_attn.models.CausalLM`: the full pass against a NumPy reference
of its formula, the cache against the full pass, generation against a
step-by-step loop, padding, saving and int8 weights."""

import keras
import numpy as np
import pytest

from keras_attn.models import CausalLM
from tests.backend import to_numpy
from tests.layer_test_case import assert_config_round_trip

V = 40


def tiny(**kwargs):
    settings = dict(
        num_layers=2, num_heads=4, hidden_dim=16, intermediate_dim=32
    )
    lm = CausalLM(V, **{**settings, **kwargs})
    lm(np.ones((1, 3), "int32"))
    # A wide embedding: tied logits far from uniform, varied tokens.
    table = np.random.default_rng(0).normal(size=(V, lm.hidden_dim))
    lm.token_embedding.embeddings.assign(table.astype("float32"))
    return lm


def tokens(batch, length, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(1, V, (batch, length)).astype("int32")


def numpy_logits(lm, ids):
    """The model's formula in NumPy (no positions: `position=None`)."""

    def norm(layer, x):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        gamma, beta = (to_numpy(w) for w in layer.weights)
        return (x - mean) / np.sqrt(var + layer.epsilon) * gamma + beta

    def dense(layer, x):
        kernel, bias = (to_numpy(w) for w in layer.weights)
        return x @ kernel + bias

    def attention(layer, x):
        wq, bq, wk, bk, wv, bv, wo, bo = (to_numpy(w) for w in layer.weights)
        q = np.einsum("btd,dhk->bthk", x, wq) + bq
        k = np.einsum("btd,dhk->bthk", x, wk) + bk
        v = np.einsum("btd,dhk->bthk", x, wv) + bv
        scores = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(q.shape[-1])
        t = x.shape[1]
        scores = np.where(np.tril(np.ones((t, t), bool)), scores, -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        context = np.einsum("bhts,bshk->bthk", weights, v)
        return np.einsum("bthk,hkd->btd", context, wo) + bo

    table = to_numpy(lm.token_embedding.embeddings)
    x = table[ids]
    for layer, block in zip(lm.attention_layers, lm.blocks, strict=True):
        x = x + attention(layer, norm(block["attention_norm"], x))
        h = dense(block["intermediate"], norm(block["feed_forward_norm"], x))
        h = 0.5 * h * (1 + np.tanh(0.7978845608 * (h + 0.044715 * h**3)))
        x = x + dense(block["output"], h)
    return norm(lm.final_norm, x) @ table.T


def test_the_full_pass_follows_the_formula():
    lm = CausalLM(
        V,
        num_layers=2,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        position=None,
    )
    ids = tokens(2, 7)
    got = to_numpy(lm(ids))
    np.testing.assert_allclose(got, numpy_logits(lm, ids), atol=2e-3)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"num_key_value_heads": 2},
        {"num_key_value_heads": 1, "position": "alibi"},
        {"position": "learned", "max_length": 32},
        {"sliding_window": 3},
    ],
    ids=["rotary", "grouped", "mqa-alibi", "learned", "window"],
)
def test_the_cache_gives_the_full_pass(kwargs):
    # A prompt through the cache at once, then a token a call: the logits
    # of the full pass, position by position.
    lm = tiny(**kwargs)
    ids = tokens(2, 9, seed=1)
    full = to_numpy(lm(ids))
    cache = lm.empty_cache(2, 16)
    logits, cache = lm.call_with_cache(ids[:, :5], cache, 0)
    steps = [to_numpy(logits)]
    for t in range(5, 9):
        logits, cache = lm.call_with_cache(ids[:, t : t + 1], cache, t)
        steps.append(to_numpy(logits))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)


def test_generate_continues_as_a_step_by_step_greedy_loop():
    lm = tiny()
    prompt = tokens(1, 5, seed=2)
    got = to_numpy(lm.generate(prompt, 6, end_token_id=0))[0]
    ids = list(prompt[0])
    for _ in range(6):  # the full pass each step, no cache
        ids.append(int(to_numpy(lm(np.array([ids], "int32")))[0, -1].argmax()))
    np.testing.assert_array_equal(got, ids[5:])


def test_a_one_token_prompt_generates_from_that_token():
    # Nothing comes before the last token: no prefill runs (it once ran
    # an empty one, which failed in the masks).
    lm = tiny()
    got = to_numpy(lm.generate(np.array([[7]], "int32"), 4, end_token_id=0))
    ids = [7]
    for _ in range(4):
        ids.append(int(to_numpy(lm(np.array([ids], "int32")))[0, -1].argmax()))
    np.testing.assert_array_equal(got[0], ids[1:])


def test_left_padding_changes_no_token():
    # A batch of prompts of several lengths, left-padded, gives each
    # prompt's tokens alone.
    lm = tiny(num_key_value_heads=2)
    prompts = [tokens(1, n, seed=n)[0] for n in (3, 6, 4)]
    batch = np.zeros((3, 6), "int32")
    for row, p in zip(batch, prompts, strict=True):
        row[6 - len(p) :] = p
    together = to_numpy(lm.generate(batch, 5, end_token_id=0))
    for row, p in zip(together, prompts, strict=True):
        alone = to_numpy(lm.generate(p[None], 5, end_token_id=0))[0]
        np.testing.assert_array_equal(row, alone)


def test_generate_stops_at_the_end_token():
    lm = tiny()
    prompt = tokens(1, 4, seed=1)
    free = to_numpy(lm.generate(prompt, 6, end_token_id=0))[0]
    k = next(i for i in range(1, 6) if free[i] not in free[:i])
    stopped = to_numpy(lm.generate(prompt, 6, end_token_id=int(free[k])))[0]
    np.testing.assert_array_equal(stopped[: k + 1], free[: k + 1])
    assert not stopped[k + 1 :].any()


def test_config_and_keras_file_round_trip(tmp_path):
    lm = tiny(num_key_value_heads=2, position="alibi", dropout=0.1)
    assert_config_round_trip(lm)
    ids = tokens(2, 6)
    path = str(tmp_path / "lm.keras")
    lm.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(to_numpy(loaded(ids)), to_numpy(lm(ids)))


@pytest.mark.slow
@pytest.mark.parametrize("weight_only", [True, False])
def test_int8_reloads_as_saved_and_ties_the_output_to_the_dequantized_table(
    tmp_path, weight_only
):
    # Keras's int8, weight-only or with activations quantized on the fly:
    # the reloaded model quantizes as this one did (a weight-only config
    # is lost by Keras 3.15's `DTypePolicyMap` route).
    lm = tiny()
    ids = tokens(2, 6)
    before = to_numpy(lm(ids))
    if weight_only:
        config = keras.quantizers.Int8QuantizationConfig(
            activation_quantizer=None
        )
        lm.quantize(config=config)
    else:
        lm.quantize("int8")
    assert lm.token_embedding.quantization_mode == "int8"
    after = to_numpy(lm(ids))
    scale = np.abs(before).max()
    np.testing.assert_allclose(after, before, atol=0.02 * scale)
    assert np.abs(after - before).max() > 0  # int8 weights, not the floats
    path = str(tmp_path / "lm.keras")
    lm.save(path)
    np.testing.assert_array_equal(
        to_numpy(keras.models.load_model(path)(ids)), after
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"hidden_dim": 10}, "hidden_dim"),
        ({"num_layers": 0}, "num_layers"),
        ({"intermediate_dim": -1}, "intermediate_dim"),
    ],
)
def test_bad_settings_are_refused_by_name(kwargs, match):
    settings = dict(
        num_layers=1, num_heads=4, hidden_dim=16, intermediate_dim=32
    )
    with pytest.raises(ValueError, match=match):
        CausalLM(V, **{**settings, **kwargs})
