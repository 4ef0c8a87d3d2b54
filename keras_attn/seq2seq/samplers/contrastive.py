"""Contrastive search (Su et al. 2022): a likely token whose
representation is unlike those of the tokens before it."""

import keras
from keras import ops

from keras_attn.seq2seq.samplers.base import (
    Sampler,
    as_alignment,
    ban,
    is_end,
    repeat_rows,
    write_step,
)


def _unit(x):
    """Rows of `x (..., D)` scaled to length 1 (zero rows stay zero)."""
    return ops.normalize(ops.cast(x, "float32"), axis=-1, order=2)


@keras.saving.register_keras_serializable(package="keras_attn")
class ContrastiveSampler(Sampler):
    """Contrastive search (Su et al. 2022; KerasHub's
    `ContrastiveSampler(k, alpha)`).

    At each step the `k` most likely tokens `v` are fed to the decoder
    (one batched call) and the one maximizing
    `(1 − alpha) · p(v) − alpha · max_j cos(h_v, h_j)` is kept, `h_j`
    running over the start token and every token kept so far. The kept
    token's decoder step is reused for the next one, so a step costs one
    decoder call on `B · k` rows. `alpha=0` is greedy search. Candidates
    are ranked by logit, so banned ids and padding are never candidates,
    even where probabilities underflow to 0.

    Args:
        k: candidates per step. Defaults to `5`.
        alpha: weight of the degeneration penalty, in `[0, 1]`. Defaults
            to `0.6`.

    Call arguments: as `Sampler`'s, and `hidden_fn`: `hidden_fn(state) ->
    (B, D)`, the representation of the token `step_fn` has just read,
    from the state it returned (e.g. the RNN state; KerasHub's `next`
    returns it as its `hidden_states`).

    References:
        - [Su et al. 2022](https://arxiv.org/abs/2202.06417)
    """

    def __init__(self, k=5, alpha=0.6):
        if not isinstance(k, int) or k < 1:
            raise ValueError(
                f"Expected k to be a positive integer. Received: k={k!r}"
            )
        if not (isinstance(alpha, (int, float)) and 0 <= alpha <= 1):
            raise ValueError(
                f"Expected alpha in [0, 1]. Received: alpha={alpha!r}"
            )
        self.k, self.alpha = k, alpha

    def get_config(self):
        return {"k": self.k, "alpha": self.alpha}

    def __call__(
        self,
        step_fn,
        state,
        start_id,
        end_id,
        max_length,
        banned_ids=(),
        source_mask=None,
        alignment_length=None,
        hidden_fn=None,
    ):
        if not callable(hidden_fn):
            raise ValueError(
                "ContrastiveSampler needs hidden_fn(state) -> (B, D), the "
                f"decoder's representation. Received: hidden_fn={hidden_fn!r}"
            )
        return self.decode_tokens(
            step_fn,
            state,
            start_id,
            end_id,
            max_length,
            banned_ids,
            source_mask,
            alignment_length,
            hidden_fn=hidden_fn,
        )

    def start(self, run, inputs, state, logits, width):
        # The start token's step, before the loop: each step looks one
        # token ahead, and reuses the kept token's decoder call.
        zero = ops.convert_to_tensor(0, dtype="int32")
        logits, state, alignment = run.step_fn(inputs, state, zero)
        first = _unit(run.hidden_fn(state))  # (B, D): the start token's
        length = run.max_length
        seen = ops.zeros((run.batch, length + 1, first.shape[-1]), "float32")
        seen = write_step(seen, zero, first)
        count = ops.ones((run.batch,), "int32")  # rows of `seen` filled
        alignment = as_alignment(run.batch, alignment)
        return state, (ops.cast(logits, "float32"), alignment, seen, count)

    def step(self, run, index, inputs, state, done, carry):
        logits, alignment, seen, count = carry
        k, batch = self.k, run.batch
        allowed = ban(logits, run.banned)  # (B, V)
        # Candidates by logit, not probability: probabilities that
        # underflow to 0 would tie with the banned ids.
        cands = ops.cast(ops.top_k(allowed, k)[1], "int32")  # (B, K)
        probs = ops.softmax(allowed, axis=-1)
        p = ops.take_along_axis(probs, cands, axis=1)  # (B, K)
        next_logits, next_state, next_alignment = run.step_fn(
            ops.reshape(cands, (-1,)), repeat_rows(state, k), index + 1
        )
        h = ops.reshape(_unit(run.hidden_fn(next_state)), (batch, k, -1))
        cos = ops.einsum("bkd,bld->bkl", h, seen)  # (B, K, L + 1)
        filled = ops.arange(run.max_length + 1, dtype="int32")[None, None]
        cos = ops.where(filled < count[:, None, None], cos, -2.0)
        score = (1 - self.alpha) * p - self.alpha * ops.max(cos, axis=-1)
        best = ops.cast(ops.top_k(score, 1)[1][:, 0], "int32")  # (B,)
        token = ops.take_along_axis(cands, best[:, None], axis=1)[:, 0]
        token = ops.where(done, 0, token)
        rows = ops.arange(batch, dtype="int32") * k + best

        def take(x):
            return ops.take(x, rows, axis=0)

        h_best = ops.take_along_axis(h, best[:, None, None], axis=1)[:, 0]
        seen = write_step(seen, index + 1, h_best)
        done = ops.logical_or(done, is_end(token, run.end_id))
        next_alignment = as_alignment(batch * k, next_alignment)
        if next_alignment.shape[-1] != 0:
            next_alignment = take(next_alignment)
        else:
            next_alignment = alignment
        carry = (
            ops.cast(take(next_logits), "float32"),
            next_alignment,
            seen,
            count + 1,
        )
        state = keras.tree.map_structure(take, next_state)
        return token, alignment, done, state, None, carry
