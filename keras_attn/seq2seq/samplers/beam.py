"""Beam search with the GNMT length and coverage penalties, and tfa's
conventions as options."""

import keras
from keras import ops

from keras_attn.seq2seq.samplers.base import (
    NEG_INF,
    Sampler,
    argmax,
    ban,
    is_end,
    write_step,
)


def length_penalty_factor(length, alpha):
    """GNMT length penalty `lp(Y) = ((5 + |Y|) / 6) ** α` (Wu et al. 2016)."""
    return ops.power((5.0 + length) / 6.0, alpha)


def coverage_penalty_value(coverage, beta, source_mask=None):
    """GNMT coverage penalty `β Σ_i log(min(Σ_t p_ti, 1))` over the source.

    `coverage (..., S)` holds the attention each source position received
    so far; masked positions (padding) do not count. A position never
    attended gets `log(1e-10)`, not `-inf`.
    """
    clipped = ops.clip(coverage, 1e-10, 1.0)
    logs = ops.log(clipped)
    if source_mask is not None:
        logs = ops.where(source_mask, logs, 0.0)
    return beta * ops.sum(logs, axis=-1)


@keras.saving.register_keras_serializable(package="keras_attn")
class BeamSampler(Sampler):
    """Beam search with the GNMT length and coverage penalties.

    Hypotheses are ranked by `log P(Y|X) / lp(Y) + cp(X; Y)` (Wu et al.
    2016), `lp(Y) = ((5 + |Y|) / 6) ** length_penalty` and
    `cp = coverage_penalty · Σ_i log(min(Σ_t p_ti, 1))` over the source
    positions `i` (the attention `p` comes from `step_fn`'s alignment;
    the call's `source_mask` leaves padding out). A finished hypothesis
    stays in the beam at no further cost; a beam wider than the number
    of hypotheses returns the exhaustive optimum. The decoder's state is
    repeated `beam_width` times along the batch axis before the first
    step.

    Args:
        beam_width: hypotheses kept per example. Defaults to `4`.
        length_penalty: GNMT `α`; 0 ranks by total log-probability.
            Defaults to `0.6`.
        coverage_penalty: GNMT `β`; needs `step_fn` to return an
            alignment. Defaults to `0.0`.
        count_end_token: whether the end token counts in `|Y|` from the
            step it is chosen (GNMT's `|Y|` is the output's length, end
            included). `False` is tfa's `BeamSearchDecoder`: the end does
            not count at the step it is chosen, then counts while the
            finished hypothesis waits in the beam, so one that finishes at
            the last step is ranked without it. Defaults to `True`.
        coverage_on_finished_only: add the coverage penalty to finished
            hypotheses only, as tfa does; by default every hypothesis is
            ranked with it, as GNMT's formula reads (an unfinished
            hypothesis is then compared with finished ones on the same
            terms). Defaults to `False`.
        return_all_beams: also return every beam (tfa's
            `BeamSearchDecoderOutput`). Defaults to `False`.
        output_all_scores: also return `"all_scores"`
            `(B, max_length, K, V)`: at each step, the penalized score of
            every continuation of every beam of the step before (tfa's
            `output_all_scores=True`; the chosen `K` are its top `K`).
            Steps after the search stopped are zeros. Defaults to `False`.

    Returns (from a call):
        A dict: the best hypothesis per example, `"ids"` `(B, max_length)`,
        `"alignment"` `(B, max_length, S)` (or `None`) and `"score"`
        `(B,)`, its penalized score. With `return_all_beams`, also
        `"beam_ids"` `(B, K, max_length)` and `"beam_scores"` `(B, K)`
        (the final beams, best first), and per step `"step_ids"`,
        `"parent_ids"` (the beam each step's hypothesis extends) and
        `"step_scores"` (its penalized score), each `(B, max_length, K)`,
        from which `gather_tree` rebuilds `beam_ids`. With
        `output_all_scores`, also `"all_scores"`.
    """

    def __init__(
        self,
        beam_width=4,
        length_penalty=0.6,
        coverage_penalty=0.0,
        count_end_token=True,
        coverage_on_finished_only=False,
        return_all_beams=False,
        output_all_scores=False,
    ):
        if not isinstance(beam_width, int) or beam_width < 1:
            raise ValueError(
                "Expected beam_width to be a positive integer. "
                f"Received: beam_width={beam_width!r}"
            )
        self.beam_width = beam_width
        self.length_penalty = length_penalty
        self.coverage_penalty = coverage_penalty
        self.count_end_token = count_end_token
        self.coverage_on_finished_only = coverage_on_finished_only
        self.return_all_beams = return_all_beams
        self.output_all_scores = output_all_scores

    @property
    def rows_per_example(self):
        return self.beam_width

    def get_config(self):
        return {
            "beam_width": self.beam_width,
            "length_penalty": self.length_penalty,
            "coverage_penalty": self.coverage_penalty,
            "count_end_token": self.count_end_token,
            "coverage_on_finished_only": self.coverage_on_finished_only,
            "return_all_beams": self.return_all_beams,
            "output_all_scores": self.output_all_scores,
        }

    def _coverage(self, run, cov):  # (BK, S) -> (B, K)
        k = self.beam_width
        if not self.coverage_penalty:
            return ops.zeros((run.batch, k), "float32")
        value = coverage_penalty_value(
            cov, self.coverage_penalty, run.source_mask
        )
        return ops.reshape(value, (-1, k))

    def start(self, run, inputs, state, logits, width):
        if self.coverage_penalty and width is None:
            raise ValueError(
                "coverage_penalty needs step_fn to return an alignment. "
                f"Received: coverage_penalty={self.coverage_penalty!r} "
                "and no alignment"
            )
        k, batch = self.beam_width, run.batch
        first = ops.concatenate([ops.zeros((1,)), ops.full((k - 1,), NEG_INF)])
        scores = ops.tile(first[None, :], (batch, 1))  # only beam 0 is live
        lengths = ops.zeros((batch, k), "float32")
        cov = ops.zeros((batch * k, 0 if width is None else width), "float32")
        length = run.max_length
        steps = ops.zeros((3, batch, length, k), "float32")  # ids, parents, s
        every = ops.zeros(  # all continuations' scores, when asked
            (batch, length, k, logits.shape[-1])
            if self.output_all_scores
            else (1, 1, 1, 1)
        )
        return state, (scores, lengths, cov, steps, scores, every)

    def next(self, run, index, logits, alignment, done, carry):
        scores, lengths, cov, steps, _, every = carry
        k, batch, vocab = self.beam_width, run.batch, logits.shape[-1]
        finished = ops.reshape(done, (-1, k))
        pad_only = ops.where(ops.arange(vocab) == 0, 0.0, NEG_INF)  # (V,)
        ends = is_end(ops.arange(vocab, dtype="int32"), run.end_id)  # (V,)
        logp = ops.log_softmax(ban(logits, run.banned), axis=-1)
        logp = ops.reshape(logp, (-1, k, vocab))
        logp = ops.where(finished[..., None], pad_only, logp)
        total = scores[..., None] + logp  # (B, K, V)
        live = ops.cast(ops.logical_not(finished), "float32")[..., None]
        new_len = lengths[..., None] + live  # (B, K, 1)
        if not self.count_end_token:  # (B, K, V): the end adds nothing
            new_len = new_len - live * ops.cast(ends, "float32")
        new_len = ops.broadcast_to(new_len, (batch, k, vocab))
        new_cov = cov + alignment * ops.reshape(live, (-1, 1))
        cover = self._coverage(run, new_cov)[..., None]  # (B, K, 1)
        if self.coverage_on_finished_only:
            cover = ops.where(
                ops.logical_or(finished[..., None], ends), cover, 0
            )
        ranked = (
            total / length_penalty_factor(new_len, self.length_penalty) + cover
        )
        best, top = ops.top_k(ops.reshape(ranked, (-1, k * vocab)), k)
        if self.output_all_scores:
            every = write_step(every, index, ranked)
        top = ops.cast(top, "int32")  # (B, K)
        beam, token = top // vocab, top % vocab
        offsets = ops.arange(batch, dtype="int32")[:, None] * k  # (B, 1)
        kept = ops.reshape(offsets + beam, (-1,))  # (BK,) rows to keep

        def pick(x):  # (B, K, V) -> the chosen (B, K)
            return ops.take_along_axis(ops.reshape(x, (-1, k * vocab)), top, 1)

        scores, lengths = pick(total), pick(new_len)
        was_done = ops.reshape(ops.take(done, kept, axis=0), (-1, k))
        finished = ops.logical_or(was_done, is_end(token, run.end_id))
        if not self.count_end_token:  # tfa: the end counts from next step
            done_now = ops.logical_and(finished, ops.logical_not(was_done))
            lengths = lengths + ops.cast(done_now, "float32")
        if self.return_all_beams:
            step = ops.stack(
                [ops.cast(token, "float32"), ops.cast(beam, "float32"), best]
            )
            steps = write_step(
                ops.reshape(steps, (3 * batch, run.max_length, k)),
                index,
                ops.reshape(step, (3 * batch, k)),
            )
            steps = ops.reshape(steps, (3, batch, run.max_length, k))
        new_cov = ops.take(new_cov, kept, axis=0)
        carry = (scores, lengths, new_cov, steps, best, every)
        token = ops.reshape(token, (-1,))
        return token, ops.reshape(finished, (-1,)), kept, carry

    def finish(self, run, emitted, alignment, done, carry):
        scores, lengths, cov, steps, last, every = carry
        k, batch = self.beam_width, run.batch
        finished = ops.reshape(done, (-1, k))
        final = scores / length_penalty_factor(lengths, self.length_penalty)
        cover = self._coverage(run, cov)  # (B, K)
        if self.coverage_on_finished_only:
            cover = ops.where(finished, cover, 0.0)
        final = final + cover
        if not self.count_end_token:
            # As tfa: the last step's ranking, where an end chosen at that
            # step is not counted yet.
            final = last
        best = ops.cast(argmax(final), "int32")  # (B,)
        rows = ops.arange(batch, dtype="int32") * k + best
        out = {
            "ids": ops.take(emitted, rows, axis=0),
            "alignment": None
            if alignment is None
            else ops.take(alignment, rows, axis=0),
            "score": ops.take_along_axis(final, best[:, None], axis=1)[:, 0],
        }
        if self.return_all_beams:
            order = ops.cast(ops.top_k(final, k)[1], "int32")  # best first
            beams = ops.reshape(emitted, (batch, k, run.max_length))
            out["beam_ids"] = ops.take_along_axis(
                beams, order[..., None], axis=1
            )
            out["beam_scores"] = ops.take_along_axis(final, order, axis=1)
            out["step_ids"] = ops.cast(steps[0], "int32")
            out["parent_ids"] = ops.cast(steps[1], "int32")
            out["step_scores"] = steps[2]
        if self.output_all_scores:
            out["all_scores"] = every
        return out
