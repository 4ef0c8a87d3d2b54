"""Contrastive search (Su et al. 2022), `keras.ops`: KerasHub's
`ContrastiveSampler` for any step-wise decoder of `search.py`."""

import keras
from keras import ops

from keras_attn.seq2seq.search import (
    _alignment_buffer,
    _as_alignment,
    _batch_size,
    _check,
    _is_end,
    _start_tokens,
    _write,
    ban,
)


def _unit(x):
    """Rows of `x (..., D)` scaled to length 1 (zero rows stay zero)."""
    return ops.normalize(ops.cast(x, "float32"), axis=-1, order=2)


def contrastive_search(
    step_fn,
    state,
    start_id,
    end_id,
    max_length,
    hidden_fn,
    top_k=5,
    alpha=0.6,
    banned_ids=(),
):
    """Contrastive search: a likely token whose representation is unlike
    those of the tokens before it.

    At each step the `top_k` most likely tokens `v` are fed to the decoder
    (one batched call) and the one maximizing
    `(1 − alpha) · p(v) − alpha · max_j cos(h_v, h_j)` is kept, `h_j`
    running over the start token and every token kept so far (Su et al.
    2022, KerasHub's `ContrastiveSampler(k, alpha)`). The kept token's
    decoder step is reused for the next one, so a step costs one decoder
    call on `B · top_k` rows. `alpha=0` is greedy search.

    Args:
        step_fn, state, start_id, end_id, max_length, banned_ids: as in
            `greedy_search`.
        hidden_fn: `hidden_fn(state) -> (B, D)`, the representation of
            the token `step_fn` has just read, from the state it returned
            (e.g. the RNN state; KerasHub's `next` returns it as its
            `hidden_states`).
        top_k: candidates per step. Defaults to `5`.
        alpha: weight of the degeneration penalty, in `[0, 1]`. Defaults
            to `0.6`.

    Returns:
        As `greedy_search`.

    Example:

    >>> import numpy as np
    >>> # Row = previous token; the state is the token read, one-hot.
    >>> table = np.log(np.array([[.1, .1, .7, .1], [.1, .1, .1, .7],
    ...                          [.1, .1, .7, .1], [.1, .3, .3, .3]]))
    >>> def step_fn(tokens, state, index):
    ...     return ops.take(table, tokens, axis=0), ops.one_hot(tokens, 4), None
    >>> out = contrastive_search(step_fn, np.zeros((1, 4)), 1, 2, 4,
    ...                          hidden_fn=lambda state: state, top_k=3)
    >>> ops.convert_to_numpy(out["ids"]).tolist()
    [[3, 2, 0, 0]]

    References:
        - [Su et al. 2022](https://arxiv.org/abs/2202.06417)
    """
    _check(start_id, end_id, max_length)
    if not isinstance(top_k, int) or top_k < 1:
        raise ValueError(
            "Expected top_k to be a positive integer. "
            f"Received: top_k={top_k!r}"
        )
    if not (isinstance(alpha, (int, float)) and 0 <= alpha <= 1):
        raise ValueError(f"Expected alpha in [0, 1]. Received: alpha={alpha!r}")
    k = top_k
    batch = _batch_size(state)
    zero = ops.convert_to_tensor(0, dtype="int32")
    tokens = _start_tokens(start_id, batch)
    logits, state, alignment = step_fn(tokens, state, zero)
    first = _unit(hidden_fn(state))  # (B, D): the start token's
    seen = ops.zeros((batch, max_length + 1, first.shape[-1]), "float32")
    seen = _write(seen, zero, first)
    count = ops.ones((batch,), "int32")  # rows of `seen` filled
    ids = ops.zeros((batch, max_length), "int32")
    align = _alignment_buffer(batch, max_length, alignment)
    done = ops.zeros((batch,), "bool")
    offsets = ops.arange(batch, dtype="int32") * k  # (B,)

    def cond(index, logits, state, alignment, carry):
        more = ops.logical_not(ops.all(carry[-1]))
        return ops.logical_and(index < max_length, more)

    def body(index, logits, state, alignment, carry):
        seen, count, ids, align, done = carry
        allowed = ban(logits, (0, *banned_ids))  # (B, V)
        # Candidates by logit, not probability: probabilities that
        # underflow to 0 would tie with the banned ids.
        cands = ops.cast(ops.top_k(allowed, k)[1], "int32")  # (B, K)
        probs = ops.softmax(allowed, axis=-1)
        p = ops.take_along_axis(probs, cands, axis=1)  # (B, K)
        wide = keras.tree.map_structure(
            lambda x: ops.repeat(x, k, axis=0), state
        )
        next_logits, next_state, next_alignment = step_fn(
            ops.reshape(cands, (-1,)), wide, index + 1
        )
        h = ops.reshape(_unit(hidden_fn(next_state)), (batch, k, -1))
        cos = ops.einsum("bkd,bld->bkl", h, seen)  # (B, K, L + 1)
        filled = ops.arange(max_length + 1, dtype="int32")[None, None, :]
        cos = ops.where(filled < count[:, None, None], cos, -2.0)
        score = (1 - alpha) * p - alpha * ops.max(cos, axis=-1)
        best = ops.cast(ops.top_k(score, 1)[1][:, 0], "int32")  # (B,)
        token = ops.take_along_axis(cands, best[:, None], axis=1)[:, 0]
        token = ops.where(done, 0, token)
        rows = offsets + best

        def take(x):
            return ops.take(x, rows, axis=0)

        h_best = ops.take_along_axis(h, best[:, None, None], axis=1)[:, 0]
        ids = _write(ids, index, token)
        align = _write(align, index, _as_alignment(batch, alignment))
        seen = _write(seen, index + 1, h_best)
        count = count + 1
        done = ops.logical_or(done, _is_end(token, end_id))
        next_alignment = (
            alignment if next_alignment is None else take(next_alignment)
        )
        return (
            index + 1,
            take(next_logits),
            keras.tree.map_structure(take, next_state),
            next_alignment,
            (seen, count, ids, align, done),
        )

    carry = (seen, count, ids, align, done)
    if alignment is None:  # `while_loop` carries tensors only

        def cond_(index, logits, state, carry):
            return cond(index, logits, state, None, carry)

        def body_(index, logits, state, carry):
            out = body(index, logits, state, None, carry)
            return out[0], out[1], out[2], out[4]

        *_, carry = ops.while_loop(cond_, body_, (zero, logits, state, carry))
    else:
        *_, carry = ops.while_loop(
            cond, body, (zero, logits, state, alignment, carry)
        )
    _, _, ids, align, _ = carry
    return {"ids": ids, "alignment": None if alignment is None else align}
