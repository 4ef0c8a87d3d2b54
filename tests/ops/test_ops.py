"""The pure functions under the layers, against NumPy written from the
formulas: `masking`, `scores`, `positional`."""

import numpy as np
import pytest

from keras_attn.ops import masking, positional, scores
from tests.backend import to_numpy

RNG = np.random.default_rng(11)
B, TQ, TK, DQ, DK, U = 2, 3, 5, 4, 6, 7
S = RNG.normal(size=(B, TQ, DQ)).astype("float32")
H = RNG.normal(size=(B, TK, DK)).astype("float32")
H4 = RNG.normal(size=(B, TK, DQ)).astype("float32")


def close(got, want, atol=1e-5):
    np.testing.assert_allclose(to_numpy(got), want, atol=atol, rtol=1e-5)


def test_dot_and_scaled_dot():
    want = np.einsum("bqd,bkd->bqk", S, H4)
    close(scores.dot_score(S, H4), want)
    close(scores.scaled_dot_score(S, H4), want / np.sqrt(DQ))


def test_general_and_low_rank():
    w = RNG.normal(size=(DQ, DK)).astype("float32")
    want = np.array(
        [
            [[S[b, i] @ w @ H[b, j] for j in range(TK)] for i in range(TQ)]
            for b in range(B)
        ]
    )
    close(scores.general_score(S, H, w), want, 1e-4)
    u = RNG.normal(size=(DQ, 3)).astype("float32")  # Uᵀ
    v = RNG.normal(size=(DK, 3)).astype("float32")  # Vᵀ
    want = np.einsum("bqr,bkr->bqk", S @ u, H @ v)
    close(scores.low_rank_score(S, H, u, v), want, 1e-4)


@pytest.mark.parametrize("chunk_size", [None, 1, 2])
def test_additive_matches_the_formula(chunk_size):
    w2 = RNG.normal(size=(DQ, U)).astype("float32")  # W₂ᵀ
    w1 = RNG.normal(size=(DK, U)).astype("float32")  # W₁ᵀ
    v = RNG.normal(size=(U,)).astype("float32")
    b = RNG.normal(size=(U,)).astype("float32")
    want = np.zeros((B, TQ, TK), "float32")
    for n in range(B):
        for i in range(TQ):
            for j in range(TK):
                want[n, i, j] = v @ np.tanh(H[n, j] @ w1 + S[n, i] @ w2 + b)
    got = scores.additive_score(S, H, w2, w1, v, b, chunk_size=chunk_size)
    close(got, want, 1e-4)


def test_causal_mask_with_offset():
    close(masking.causal_mask(3, 4), np.tril(np.ones((3, 4)), 0) > 0)
    close(masking.causal_mask(2, 5, offset=2), np.tril(np.ones((2, 5)), 2) > 0)


def test_merge_masks_is_the_logical_and_of_its_parts():
    qm = np.array([[1, 1, 0], [1, 0, 0]], bool)
    vm = RNG.random((B, TK)) > 0.3
    am = RNG.random((B, TQ, TK)) > 0.2
    causal = np.tril(np.ones((TQ, TK))) > 0
    want = qm[:, :, None] & vm[:, None, :] & am & causal
    got = masking.merge_masks(TQ, TK, qm, vm, am, use_causal_mask=True)
    close(np.broadcast_to(to_numpy(got), want.shape), want.astype(bool))
    assert masking.merge_masks(TQ, TK) is None


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_masked_softmax_zero_weights_and_empty_rows(dtype):
    import keras

    e = RNG.normal(size=(2, 4)).astype("float32") * 5
    mask = np.array([[1, 0, 1, 1], [0, 0, 0, 0]], bool)
    got = masking.masked_softmax(keras.ops.cast(e, dtype), mask)
    got = to_numpy(keras.ops.cast(got, "float32"))
    row = np.exp(e[0] - e[0][mask[0]].max()) * mask[0]
    tol = 1e-6 if dtype == "float32" else 1e-2
    np.testing.assert_allclose(got[0], row / row.sum(), atol=tol)
    assert got[0, 1] == 0.0 and np.all(got[1] == 0.0)
    assert (
        masking.large_negative_number(dtype)
        > {"float32": -3.5e38, "float16": -65504, "bfloat16": -3.3e38}[dtype]
    )


def test_any_valid():
    close(masking.any_valid(np.array([[0, 1], [0, 0]])), [True, False])


def test_sinusoidal_encoding_matches_the_formula():
    positions, depth = np.arange(7), 10
    want = np.zeros((7, depth))
    for p in positions:
        for i in range(depth // 2):
            angle = p / 10000 ** (2 * i / depth)
            want[p, 2 * i], want[p, 2 * i + 1] = np.sin(angle), np.cos(angle)
    close(positional.sinusoidal_encoding(positions, depth), want, 1e-5)


def test_masked_softmax_ignores_many_masked_keys_whatever_their_scores():
    # Masked logits sit MASK_MARGIN below the smallest one (not at -1e9,
    # which spends a full-integer model's range): with 100,000 masked keys
    # the valid weights still equal a softmax over the valid keys alone,
    # however large or small the masked keys' own scores are.
    rng = np.random.default_rng(3)
    valid = rng.normal(scale=4.0, size=(2, 1, 5)).astype("float32")
    masked = rng.normal(scale=50.0, size=(2, 1, 100_000)).astype("float32")
    scores_ = np.concatenate([valid, masked], axis=-1)
    mask = np.zeros(scores_.shape, bool)
    mask[..., :5] = True
    got = to_numpy(masking.masked_softmax(scores_, mask))
    e = np.exp(valid.astype("float64") - valid.max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(got[..., :5], want, rtol=2e-6, atol=0)
    assert np.all(got[..., 5:] == 0.0)
    assert masking.MASK_MARGIN >= np.log(1e6 / np.finfo("float32").eps)
