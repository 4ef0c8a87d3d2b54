"""How a streaming decoder's tokens are chosen, in NumPy: greedy, a draw
from the caller's random numbers, and beam search one step at a time.

Each follows the conventions of `keras_attn.seq2seq`'s samplers, so a
file run here decodes as the Keras model does: padding (0) and the banned
ids are never chosen (their logits at -1e9), a finished row gives 0, and
`BeamSearch` ranks hypotheses as `BeamSampler` does with its defaults.

Every decode loop of the runtime (`StreamingDecoder`, the shared loops of
`keras_attn_runtime.batching`, the translator, the decoder-only bundle)
drives a search through one interface, whatever the search:

- `advance(logits, alignment=None)`: one step; returns `(kept, tokens)`,
  the rows the decoder's state must be reordered by (`None`: as they
  are) and each row's next token;
- `done`: the finished rows; `emitted`, `aligned`: each row so far;
- `settled()`: each example's tokens that no later step can change;
- `best()`: each example's answer, its score and its alignment.

`TokenSearch` is greedy search or sampling (one row an example),
`BeamSearch` beam search; `Handover` hands each example's tokens over
once they are decided (`decided`).
"""

import numpy as np

NEG_INF = -1e9


def is_end(tokens, end_id):
    """Whether each of `tokens` ends a sequence: `end_id` is one token or
    a list of them, as Keras's samplers take `end_token_id`."""
    ends = np.asarray(end_id, "int64").reshape(-1)
    return (np.asarray(tokens)[..., None] == ends).any(-1)


def greedy(logits, step):
    """The most likely token of each row."""
    return np.argmax(logits, axis=-1).astype("int32")


def sample_with(uniforms, temperature=1.0, top_k=None, top_p=1.0):
    """A `choose` that draws each step's token from the softmax of the
    logits (over the `top_k` most likely, when given, and the nucleus of
    probability `top_p`: the most likely tokens until their sum reaches
    it) by inverting its cumulative distribution at `uniforms[step]`
    (`(steps, B)` numbers in `[0, 1)` from the caller)."""
    uniforms = np.asarray(uniforms, "float32")

    def choose(logits, step):
        z = np.asarray(logits, "float64") / temperature
        if top_k is not None:
            kth = np.sort(z, axis=-1)[:, -top_k][:, None]
            z = np.where(z >= kth, z, -np.inf)
        if top_p < 1:
            p = np.exp(z - z.max(-1, keepdims=True))
            p = p / p.sum(-1, keepdims=True)
            ranked = -np.sort(-p, axis=-1)
            before = np.cumsum(ranked, axis=-1) - ranked
            smallest = np.where(before < top_p, ranked, np.inf).min(-1)
            z = np.where(p >= smallest[:, None], z, -np.inf)
        p = np.exp(z - z.max(-1, keepdims=True))
        cdf = np.cumsum(p / p.sum(-1, keepdims=True), axis=-1)
        u = uniforms[step][:, None]
        picked = (cdf <= u).sum(-1)
        return np.minimum(picked, z.shape[-1] - 1).astype("int32")

    return choose


def banned(logits, banned_ids):
    """`logits` as float32 with padding (0) and `banned_ids` at -1e9."""
    logits = np.array(logits, "float32")
    logits[:, [0, *banned_ids]] = NEG_INF
    return logits


def log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def length_penalty_factor(length, alpha):
    """GNMT `lp(Y) = ((5 + |Y|) / 6) ** α` (Wu et al. 2016)."""
    return ((np.float32(5.0) + length) / np.float32(6.0)) ** np.float32(alpha)


def coverage_penalty_value(coverage, beta, source_mask=None):
    """GNMT `β Σ_i log(min(Σ_t p_ti, 1))`, masked positions left out and a
    position never attended counted as `log(1e-10)`."""
    logs = np.log(np.clip(coverage, np.float32(1e-10), np.float32(1.0)))
    if source_mask is not None:
        logs = np.where(source_mask, logs, np.float32(0.0))
    return np.float32(beta) * logs.sum(-1, dtype="float32")


def top_k(x, k):
    """The indices of the `k` largest values of each row of `x`, largest
    first, the lower index first among equal values (as `ops.top_k`):
    a partition, then a sort of `k` candidates (not of the whole row)."""
    out = np.empty((len(x), k), "int64")
    part = np.argpartition(-x, k - 1, axis=-1)[:, :k]
    kth = np.take_along_axis(x, part, axis=-1).min(axis=-1)
    for row, values in enumerate(x):
        above = np.flatnonzero(values > kth[row])
        tied = np.flatnonzero(values == kth[row])[: k - len(above)]
        chosen = np.concatenate([above, tied])
        out[row] = chosen[np.lexsort((chosen, -values[chosen]))]
    return out


class TokenSearch:
    """Greedy search, or a draw a step (`choose`: `sample_with`'s), one
    row an example, in the interface every loop drives (see the module).

    Args:
        batch: the examples (rows) `B`.
        end_id: the token that ends a row, or a list of them.
        choose: `choose(logits (B, V), step) -> (B,)` tokens. Defaults to
            `greedy`.
        banned_ids: tokens never chosen, besides padding (0). `None`:
            the logits as they come, nothing banned (as LiteRT-LM's
            engine reads a bundle's). Defaults to `()`.

    Attributes:
        emitted: `(B, steps)` int32, each row's tokens (0 after its end).
        aligned: `(B, steps, S)` float32 (`None` when the decoder gives
            no alignment).
        score: `(B,)`, each row's log-probability so far.
        done: `(B,)`, the finished rows.
    """

    k = 1

    def __init__(self, batch, end_id, choose=greedy, banned_ids=()):
        self.end_id, self.choose = end_id, choose
        self.banned_ids = None if banned_ids is None else tuple(banned_ids)
        self.done = np.zeros((batch,), bool)
        self.emitted = np.zeros((batch, 0), "int32")
        self.score = np.zeros((batch,), "float32")
        self.aligned = None

    def advance(self, logits, alignment=None):
        """One step: `(None, tokens (B,))`; a finished row gives 0."""
        if self.banned_ids is not None:
            logits = banned(logits, self.banned_ids)
        picked = self.choose(logits, self.emitted.shape[1])
        tokens = np.where(self.done, 0, picked).astype("int32")
        # log p(token) = z[token] - max z - log Σ exp(z - max z)
        z = np.asarray(logits, "float32")
        top = z.max(-1)
        total = np.exp(z - top[:, None]).sum(-1)
        chosen = z[np.arange(len(tokens)), tokens]
        logp = chosen - top - np.log(total)
        self.score = self.score + np.where(self.done, 0, logp)
        self.done = self.done | is_end(tokens, self.end_id)
        self.emitted = np.concatenate([self.emitted, tokens[:, None]], 1)
        if alignment is not None:
            step = np.asarray(alignment, "float32")[:, None]
            before = step[:, :0] if self.aligned is None else self.aligned
            self.aligned = np.concatenate([before, step], axis=1)
        return None, tokens

    def settled(self):
        """Every row's tokens: a chosen token is never taken back."""
        return list(self.emitted)

    def best(self):
        """`(ids (B, steps), score (B,), alignment or None)`."""
        return self.emitted, self.score, self.aligned


def up_to_end(ids, end_id):
    """How many of `ids` (a row) count: up to its first end (`end_id`: a
    token or a list), included, else up to its padding."""
    ends = np.flatnonzero(is_end(ids, end_id))
    return int(ends[0]) + 1 if len(ends) else int(np.count_nonzero(ids))


def decided(search, last=False):
    """Each example's `(ids, alignment (n, S) or None)` that `search`
    (a `TokenSearch` or a `BeamSearch`) has decided: the tokens its
    hypotheses all hold (`settled`), or, once every row is done or at
    the `last` step, its best hypothesis; up to its end, included."""
    if last or search.done.all():
        ids, _, aligned = search.best()
        rows = range(len(ids))
    else:
        ids, aligned = search.settled(), search.aligned
        rows = range(0, len(search.done), search.k)  # each example's first
    out = []
    for example, row in enumerate(rows):
        n = up_to_end(ids[example], search.end_id)
        align = None if aligned is None else aligned[row, :n]
        out.append((ids[example][:n].tolist(), align))
    return out


class Handover:
    """Hands over each example's decided tokens (`decided`) once: after
    each step, `take(last)` gives, per example, its `(ids, alignment)`
    when they grew since the last take, or the final answer once (when
    the search is done or at its `last` step); else `None`. `ids` is
    everything decided so far: what was taken before begins it.

    Attributes:
        sent: per example, the tokens taken so far.
        finished: whether the final answers were taken.
    """

    def __init__(self, search):
        self.search = search
        self.sent = [0] * (len(search.done) // search.k)
        self.finished = False

    def take(self, last=False):
        final = last or bool(self.search.done.all())
        if self.finished:
            return [None] * len(self.sent)
        out = []
        for example, (ids, align) in enumerate(decided(self.search, final)):
            grew = len(ids) > self.sent[example]
            out.append((ids, align) if grew or final else None)
            self.sent[example] = max(self.sent[example], len(ids))
        self.finished = final
        return out


def check_beam_width(beam_width):
    if not isinstance(beam_width, int) or beam_width < 1:
        raise ValueError(
            "Expected beam_width to be a positive integer. "
            f"Received: beam_width={beam_width!r}"
        )


class BeamSearch:
    """Beam search with the GNMT length and coverage penalties, advanced
    by the caller one decoder step at a time (the decoder runs
    elsewhere: a LiteRT file's `step`).

    Hypotheses are ranked by `log P(Y|X) / lp(Y) + cp(X; Y)`, as
    `keras_attn.seq2seq.samplers.BeamSampler` ranks them with its
    defaults (the end token counts in `|Y|`; every hypothesis carries the
    coverage penalty); a finished hypothesis stays in the beam at no cost.

    Args:
        batch: the examples `B`; the decoder runs `B · beam_width` rows,
            example `b`'s beams at rows `b·K ... b·K + K - 1`.
        end_id: the token that ends a hypothesis, or a list of them.
        beam_width: hypotheses kept per example. Defaults to `4`.
        length_penalty: GNMT `α`. Defaults to `0.6`.
        coverage_penalty: GNMT `β` (needs the decoder's alignment).
            Defaults to `0.0`.
        source_mask: boolean `(B, S)`: the source positions the coverage
            counts. Defaults to `None` (all).
        banned_ids: tokens never chosen, besides padding. Defaults to `()`.

    Attributes:
        emitted: `(B·K, steps)` int32, each row's hypothesis so far.
        aligned: `(B·K, steps, S)` float32, its alignment (`None` when
            the decoder gives none).
        done: `(B·K,)`, the finished rows.
    """

    def __init__(
        self,
        batch,
        end_id,
        beam_width=4,
        length_penalty=0.6,
        coverage_penalty=0.0,
        source_mask=None,
        banned_ids=(),
    ):
        check_beam_width(beam_width)
        k = self.k = beam_width
        self.end_id, self.banned_ids = end_id, tuple(banned_ids)
        self.alpha, self.beta = length_penalty, coverage_penalty
        first = np.array([0.0] + [NEG_INF] * (k - 1), "float32")
        self.scores = np.tile(first, (batch, 1))  # only beam 0 is live
        self.lengths = np.zeros((batch, k), "float32")
        self.coverage = None
        self.source_mask = (
            None
            if source_mask is None
            else np.repeat(np.asarray(source_mask, bool), k, axis=0)
        )
        self.done = np.zeros((batch * k,), bool)
        self.emitted = np.zeros((batch * k, 0), "int32")
        self.aligned = None

    def _cover(self, coverage):  # (B·K, S) -> (B, K)
        if not self.beta:
            return np.zeros_like(self.scores)
        value = coverage_penalty_value(coverage, self.beta, self.source_mask)
        return value.reshape(-1, self.k)

    def advance(self, logits, alignment=None):
        """One step: `logits (B·K, V)` (and the `alignment (B·K, S)` when
        the coverage counts) of every row. Returns `kept`, `(B·K,)`, the
        rows the decoder's state must be reordered by (`state[kept]`);
        `emitted`, `done` and the scores are updated."""
        k, (batch, _), vocab = self.k, self.scores.shape, logits.shape[-1]
        if self.beta and alignment is None:
            raise ValueError(
                "coverage_penalty needs the decoder's alignment. Received: "
                f"coverage_penalty={self.beta!r} and alignment=None"
            )
        finished = self.done.reshape(-1, k)
        pad_only = np.where(np.arange(vocab) == 0, 0.0, NEG_INF)
        logp = log_softmax(banned(logits, self.banned_ids)).reshape(
            -1, k, vocab
        )
        logp = np.where(finished[..., None], pad_only.astype("float32"), logp)
        total = self.scores[..., None] + logp  # (B, K, V)
        live = (~finished).astype("float32")[..., None]  # (B, K, 1)
        new_len = np.broadcast_to(self.lengths[..., None] + live, total.shape)
        coverage = None
        if alignment is not None:
            previous = self.coverage
            if previous is None:
                previous = np.zeros(alignment.shape, "float32")
            coverage = previous + alignment * live.reshape(-1, 1)
        cover = self._cover(coverage)[..., None]
        ranked = total / length_penalty_factor(new_len, self.alpha) + cover
        top = top_k(ranked.reshape(batch, k * vocab), k)  # (B, K)
        beam, token = top // vocab, (top % vocab).astype("int32")
        kept = (np.arange(batch)[:, None] * k + beam).reshape(-1)
        self.scores = np.take_along_axis(total.reshape(batch, -1), top, 1)
        self.lengths = np.take_along_axis(new_len.reshape(batch, -1), top, 1)
        token = token.reshape(-1)
        self.done = self.done[kept] | is_end(token, self.end_id)
        if coverage is not None:
            self.coverage = coverage[kept]
            step = np.asarray(alignment, "float32")[kept][:, None]
            before = step[:, :0] if self.aligned is None else self.aligned
            self.aligned = np.concatenate([before[kept], step], axis=1)
        self.emitted = np.concatenate(
            [self.emitted[kept], token[:, None]], axis=1
        )
        return kept, token

    def settled(self):
        """`(B,)` lists: each example's tokens that every one of its beams
        holds (a prefix of whatever hypothesis wins)."""
        beams = self.emitted.reshape(len(self.scores), self.k, -1)
        agree = (beams == beams[:, :1]).all(axis=1)  # (B, steps)
        lengths = np.cumprod(agree, axis=1).sum(axis=1)
        return [b[0, :n] for b, n in zip(beams, lengths, strict=True)]

    def best(self):
        """`(ids (B, steps), score (B,), alignment (B, steps, S) or
        None)`: each example's best hypothesis (0 after its end), its
        penalized score and its alignment."""
        final = self.scores / length_penalty_factor(self.lengths, self.alpha)
        final = final + self._cover(self.coverage)
        best = np.argmax(final, axis=-1)  # the first on ties
        rows = np.arange(len(final)) * self.k + best
        aligned = None if self.aligned is None else self.aligned[rows]
        return self.emitted[rows], final[np.arange(len(final)), best], aligned
