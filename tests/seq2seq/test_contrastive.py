"""Contrastive search (Su et al. 2022; KerasHub's `ContrastiveSampler`)
against a NumPy transcription of its rule on a small recurrent decoder;
part of the JAX and PyTorch suite."""

import numpy as np
import pytest
from keras import ops

from keras_attn.seq2seq import contrastive_search, greedy_search

V, D, START, END = 7, 4, 1, 2
RNG = np.random.default_rng(11)
EMBED = RNG.normal(size=(V, D)).astype("float32")
RECUR = RNG.normal(scale=0.5, size=(D, D)).astype("float32")
OUT = RNG.normal(scale=2.0, size=(D, V)).astype("float32")


def np_step(tokens, h):
    h = np.tanh(EMBED[tokens] + h @ RECUR)
    return h @ OUT, h


def step_fn(tokens, state, index):
    h = ops.tanh(ops.take(EMBED, tokens, axis=0) + ops.matmul(state[0], RECUR))
    return ops.matmul(h, OUT), (h,), None


def hidden_fn(state):
    return state[0]


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def reference(h0, k, alpha, max_length, banned=(0,)):
    """The rule as the paper writes it, one example, one candidate at a
    time."""
    logits, h = np_step(np.array([START]), h0[None])
    seen, out = [h[0]], []
    for _ in range(max_length):
        z = logits[0].copy()
        z[list(banned)] = -1e9
        p = softmax(z)
        best, best_score = None, -np.inf
        for v in np.argsort(-p, kind="stable")[:k]:
            nl, nh = np_step(np.array([v]), h)
            u = nh[0] / np.linalg.norm(nh[0])
            sim = max(float(u @ (s / np.linalg.norm(s))) for s in seen)
            score = (1 - alpha) * p[v] - alpha * sim
            if score > best_score:
                best, best_score, keep = v, score, (nl, nh)
        out.append(int(best))
        if best == END:
            break
        logits, h = keep
        seen.append(h[0])
    return out


def strip(ids):
    ids = [int(i) for i in ids]
    return ids[: ids.index(END) + 1] if END in ids else ids


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.6, 1.0])
def test_contrastive_search_follows_its_rule(alpha):
    h0 = RNG.normal(size=(5, D)).astype("float32")
    out = contrastive_search(
        step_fn, (h0,), START, END, 8, hidden_fn, top_k=3, alpha=alpha
    )
    ids = ops.convert_to_numpy(out["ids"])
    assert out["alignment"] is None
    for b in range(5):
        assert strip(ids[b]) == reference(h0[b], 3, alpha, 8), (alpha, b)
        tail = ids[b][len(strip(ids[b])) :]
        assert not tail.any()  # padding after the end token


def test_alpha_zero_is_greedy_and_alpha_changes_the_output():
    h0 = RNG.normal(size=(16, D)).astype("float32")
    greedy = greedy_search(step_fn, (h0,), START, END, 10)["ids"]
    zero = contrastive_search(step_fn, (h0,), START, END, 10, hidden_fn, 4, 0.0)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(zero["ids"]), ops.convert_to_numpy(greedy)
    )
    penalized = contrastive_search(
        step_fn, (h0,), START, END, 10, hidden_fn, 4, 0.8
    )["ids"]
    assert (
        ops.convert_to_numpy(penalized) != ops.convert_to_numpy(greedy)
    ).any()


def test_alignment_is_the_kept_tokens(tmp_path):
    attention = RNG.dirichlet(np.ones(3), size=V).astype("float32")

    def aligned(tokens, state, index):
        logits, state, _ = step_fn(tokens, state, index)
        return logits, state, ops.take(attention, tokens, axis=0)

    h0 = RNG.normal(size=(3, D)).astype("float32")
    out = contrastive_search(aligned, (h0,), START, END, 6, hidden_fn, 3, 0.5)
    ids, align = (ops.convert_to_numpy(out[k]) for k in ("ids", "alignment"))
    for b in range(3):
        previous = [START] + strip(ids[b])[:-1]  # the token read at each step
        for t, token in enumerate(previous):
            np.testing.assert_allclose(align[b, t], attention[token], atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"top_k": 0}, "top_k=0"),
        ({"alpha": 1.5}, "alpha=1.5"),
        ({"alpha": -0.1}, "alpha=-0.1"),
    ],
)
def test_bad_arguments_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        contrastive_search(
            step_fn, (np.zeros((1, D), "float32"),), START, END, 4, hidden_fn,
            **kwargs,
        )  # fmt: skip


def test_banned_and_padding_ids_are_never_candidates():
    # With one spiked logit every other probability underflows to 0, tying
    # with the banned ones: top_k over probabilities picked id 0.
    spike = np.zeros((1, V), "float32")
    spike[0, 5] = 1e9

    def spiked(tokens, state, index):
        h = ops.tanh(
            ops.take(EMBED, tokens, axis=0) + ops.matmul(state[0], RECUR)
        )
        rows = ops.shape(tokens)[0]
        return ops.tile(ops.convert_to_tensor(spike), (rows, 1)), (h,), None

    h0 = np.zeros((2, D), "float32")
    out = contrastive_search(
        spiked,
        (h0,),
        START,
        END,
        4,
        hidden_fn=hidden_fn,
        top_k=2,
        alpha=0.9,
        banned_ids=(3,),
    )
    ids = np.asarray(out["ids"])
    assert ids.shape == (2, 4)
    assert not np.isin(ids, [0, 3]).any(), ids
