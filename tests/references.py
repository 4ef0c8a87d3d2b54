"""NumPy references of the layers, written from the papers' formulas
with a layer's own weights: the attention scores (Bahdanau, Luong and
the CS224N notes), multi-head attention (Vaswani et al.), structured
self-attention (Lin et al.), sinusoidal and rotary positions and ALiBi's
slopes. Each layer's tests, and the property tests, compare against
them."""

import numpy as np

from tests import layer_test_case as ltc
from tests.backend import to_numpy


def np_sinusoidal(positions, depth, wavelength=10000.0):
    out = np.zeros((len(positions), depth))
    for p_idx, p in enumerate(positions):
        for i in range(depth):
            angle = p / wavelength ** ((i - i % 2) / depth)
            out[p_idx, i] = np.sin(angle) if i % 2 == 0 else np.cos(angle)
    return out


def np_rotary(x, positions, wavelength=10000.0, scale=1.0):
    """Half-split rotary from the formula, one pair at a time."""
    out = np.empty_like(x, dtype="float64")
    k = x.shape[-1]
    half = k // 2
    for t, p in enumerate(positions):
        for j in range(half):
            theta = (p / scale) * wavelength ** (-2.0 * j / k)
            a, b = x[..., t, :, j], x[..., t, :, j + half]
            out[..., t, :, j] = a * np.cos(theta) - b * np.sin(theta)
            out[..., t, :, j + half] = b * np.cos(theta) + a * np.sin(theta)
    return out


def np_slopes(h):
    """The paper's slopes: 2^(-8/n) powers, interpolated for non powers."""
    n = 1
    while n * 2 <= h:
        n *= 2
    first = [2 ** (-8 * i / n) for i in range(1, n + 1)]
    second = [2 ** (-8 * i / (2 * n)) for i in range(1, 2 * n + 1)]
    return np.array(first + second[::2][: h - n])


def np_scores(layer, q, k):
    """Scores written from the formulas (CS224N notes), layer's weights."""
    if layer.score == "dot":
        return np.einsum("bqd,bkd->bqk", q, k)
    if layer.score == "scaled_dot":
        return np.einsum("bqd,bkd->bqk", q, k) / np.sqrt(q.shape[-1])
    if layer.score == "general":
        w = layer.kernel.numpy()  # W: (Dq, Dk); e = sᵀ W h
        return np.einsum("bqd,de,bke->bqk", q, w, k)
    if layer.score == "low_rank":
        u = layer.query_kernel.numpy().T  # U: (k, Dq)
        v = layer.key_kernel.numpy().T  # V: (k, Dk)
        us = np.einsum("rd,bqd->bqr", u, q)
        vh = np.einsum("rd,bkd->bkr", v, k)
        return np.einsum("bqr,bkr->bqk", us, vh)
    if layer.score == "concat":  # c Σ_d tanh(σ (s_i + h_j))_d
        sigma = 1.0 if layer.scale is None else float(layer.scale.numpy())
        c = float(layer.concat_score_weight.numpy())
        summed = q[:, :, None, :] + k[:, None, :, :]
        return c * np.tanh(sigma * summed).sum(-1)
    w1 = layer.key_kernel.numpy().T  # W₁: (U, Dk)
    w2 = layer.query_kernel.numpy().T  # W₂: (U, Dq)
    vv = layer.score_kernel.numpy()
    b = layer.bias.numpy() if layer.bias is not None else 0.0
    out = np.zeros((q.shape[0], q.shape[1], k.shape[1]), "float64")
    for bi in range(q.shape[0]):
        for i in range(q.shape[1]):
            for j in range(k.shape[1]):
                hidden = w1 @ k[bi, j] + w2 @ q[bi, i] + b
                out[bi, i, j] = vv @ np.tanh(hidden)
    return out


def np_multi_head_positional(layer, query, value, mask):
    """Vaswani et al.'s formulas with the layer's weights, in NumPy."""
    names = ["query", "key", "value", "output"]
    names = [f"{n}_{k}" for n in names for k in ("kernel", "bias")]
    if layer.feed_forward is not None:
        names += ["ff_kernel_1", "ff_bias_1", "ff_kernel_2", "ff_bias_2"]
    w = {n: to_numpy(getattr(layer, n)) for n in names}

    def pos(x, stream):
        if layer.position is None:
            return x
        if layer.position == "sinusoidal":
            return x + np_sinusoidal(np.arange(x.shape[1]), x.shape[2])
        return (
            x + layer._stream_positions[stream].embeddings.numpy()[: x.shape[1]]
        )

    q = np.einsum("btd,dhk->bthk", pos(query, "query"), w["query_kernel"])
    q += w["query_bias"]
    k = np.einsum("btd,dhk->bthk", pos(value, "key"), w["key_kernel"])
    k += w["key_bias"]
    v = np.einsum("btd,dhk->bthk", pos(value, "value"), w["value_kernel"])
    v += w["value_bias"]
    logits = np.einsum("bqhk,bvhk->bhqv", q, k) / np.sqrt(layer.key_dim)
    alpha = ltc.np_masked_softmax(
        logits, np.broadcast_to(mask[:, None], logits.shape)
    )
    heads = np.einsum("bhqv,bvhd->bqhd", alpha, v)  # (B, Tq, H, Dv)

    def g(z):
        hidden = np.maximum(z @ w["ff_kernel_1"] + w["ff_bias_1"], 0)
        return hidden @ w["ff_kernel_2"] + w["ff_bias_2"]

    if layer.feed_forward == "per_head":
        heads = g(heads)
    elif layer.feed_forward == "concat":
        b, t, h, d = heads.shape
        heads = g(heads.reshape(b, t, h * d)).reshape(b, t, h, d)
    out = np.einsum("bqhd,hdo->bqo", heads, w["output_kernel"])
    out += w["output_bias"]
    return np.where(mask.any(-1)[..., None], out, 0.0), alpha


def np_structured_self_attention(layer, h, mask):
    """A = softmax(W_s2 tanh(W_s1 Hᵀ)), M = A H, P = mean ‖AAᵀ − I‖²_F."""
    w_s1 = layer.hidden_kernel.numpy().T  # (d_a, D)
    w_s2 = layer.hop_kernel.numpy().T  # (r, d_a)
    a_list, m_list, p_list = [], [], []
    for b in range(h.shape[0]):
        logits = w_s2 @ np.tanh(w_s1 @ h[b].T)  # (r, T)
        a = ltc.np_masked_softmax(
            logits, np.broadcast_to(mask[b], logits.shape)
        )
        a_list.append(a)
        m_list.append(a @ h[b])  # (r, D)
        diff = a @ a.T - np.eye(a.shape[0])
        p_list.append(np.sum(diff**2))
    return np.stack(a_list), np.stack(m_list), np.mean(p_list)
