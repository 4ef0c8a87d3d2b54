"""Greedy, sampling and beam search for any step-wise decoder, `keras.ops`.

A decoder is given as one function,

    step_fn(tokens (B,), state, index) -> (logits (B, V), state, alignment)

where `state` is any nest of tensors whose first axis is the batch (RNN
states, the encoder memory and its mask, a key/value cache...), `index` is
the position being decoded (an int32 scalar tensor, 0 for the first
token) and `alignment` is the attention over the source, `(B, S)`, or
`None`. The searches run the loop with `keras.ops.while_loop` on fixed-size
buffers, so they trace under `jax.jit` and `tf.function` (and therefore
live inside an exported SavedModel) and run eagerly on PyTorch.

Token conventions: every output starts after `start_id` (one id, or one
per example `(B,)`); `end_id` (one id, or a list: any of them) ends it
and is kept in the output; positions after it hold 0, the padding id,
which is never emitted. Columns in `banned_ids` (e.g. the start token,
`[UNK]`) are never emitted either.
"""

import keras
from keras import ops

NEG_INF = -1e9


def ban(logits, banned_ids=()):
    """`logits (..., V)` as float32 with the `banned_ids` columns at -1e9."""
    logits = ops.cast(logits, "float32")
    if not banned_ids:
        return logits
    vocab = ops.arange(ops.shape(logits)[-1], dtype="int32")
    banned = ops.convert_to_tensor(list(banned_ids), dtype="int32")
    hit = ops.any(ops.equal(vocab[:, None], banned[None, :]), axis=1)  # (V,)
    return ops.where(hit, NEG_INF, logits)


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


def _write(buffer, index, value):
    """`buffer[:, index] = value` for `buffer (N, L, ...)`, `value (N, ...)`."""
    length = ops.shape(buffer)[1]
    hit = ops.equal(ops.arange(length, dtype="int32"), index)  # (L,)
    hit = ops.reshape(hit, (1, -1) + (1,) * (len(buffer.shape) - 2))
    return ops.where(hit, ops.expand_dims(value, 1), buffer)


def _argmax(x):
    """`argmax` over the last axis through `top_k` (first index on ties):
    TensorFlow's `argmax` lowering in Keras adds a non-builtin LiteRT op."""
    return ops.top_k(x, 1)[1][..., 0]


def _batch_size(state):
    leaves = keras.tree.flatten(state)
    if not leaves:
        raise ValueError(
            "Expected state to hold at least one tensor with a batch axis. "
            f"Received: state={state!r}"
        )
    return ops.shape(leaves[0])[0]


def _ids(value):
    """The ids of `end_id`: an int or a non-empty list of ints."""
    ids = list(value) if isinstance(value, (list, tuple)) else [value]
    ok = ids and all(isinstance(i, int) and i >= 0 for i in ids)
    return ids if ok else None


def _check(start_id, end_id, max_length):
    if (
        isinstance(start_id, int)
        and start_id < 0
        or (
            not isinstance(start_id, int)
            and len(getattr(start_id, "shape", ())) != 1
        )
    ):
        raise ValueError(
            "Expected start_id to be a non-negative integer or a `(B,)` "
            f"tensor of them. Received: start_id={start_id!r}"
        )
    if _ids(end_id) is None:
        raise ValueError(
            "Expected end_id to be a non-negative integer or a list of "
            f"them. Received: end_id={end_id!r}"
        )
    if not isinstance(max_length, int) or max_length < 1:
        raise ValueError(
            "Expected max_length to be a positive integer. "
            f"Received: max_length={max_length!r}"
        )


def _is_end(token, end_id):
    """Whether each token is one of the end ids."""
    ends = ops.convert_to_tensor(_ids(end_id), dtype="int32")
    return ops.any(ops.equal(ops.expand_dims(token, -1), ends), axis=-1)


def _start_tokens(start_id, batch, repeats=1):
    """`(B·repeats,)` start tokens: one id for all or one per example."""
    if isinstance(start_id, int):
        return ops.full((batch * repeats,), start_id, dtype="int32")
    return ops.repeat(ops.cast(start_id, "int32"), repeats, axis=0)


def _alignment_buffer(rows, max_length, alignment):
    width = 0 if alignment is None else ops.shape(alignment)[-1]
    return ops.zeros((rows, max_length, width), "float32")


def _as_alignment(rows, alignment):
    if alignment is None:
        return ops.zeros((rows, 0), "float32")
    return ops.cast(alignment, "float32")


def _token_search(step_fn, state, start_id, end_id, max_length, banned, pick):
    """Greedy and sampling: one token per step chosen by `pick`."""
    _check(start_id, end_id, max_length)
    batch = _batch_size(state)
    tokens = _start_tokens(start_id, batch)
    zero = ops.convert_to_tensor(0, dtype="int32")
    logits, state, alignment = step_fn(tokens, state, zero)
    ids = ops.zeros((batch, max_length), "int32")
    align = _alignment_buffer(batch, max_length, alignment)
    done = ops.zeros((batch,), "bool")

    def advance(index, logits, state, alignment, done, ids, align):
        token = ops.cast(
            pick(ban(logits, (0, *banned)), index), "int32"
        )  # (B,)
        token = ops.where(done, 0, token)
        ids = _write(ids, index, token)
        align = _write(align, index, _as_alignment(batch, alignment))
        done = ops.logical_or(done, _is_end(token, end_id))
        return token, state, done, ids, align

    tokens, state, done, ids, align = advance(
        zero, logits, state, alignment, done, ids, align
    )

    def cond(index, tokens, state, done, ids, align):
        more = ops.logical_not(ops.all(done))
        return ops.logical_and(index < max_length, more)

    def body(index, tokens, state, done, ids, align):
        logits, state, alignment = step_fn(tokens, state, index)
        return (
            index + 1,
            *advance(index, logits, state, alignment, done, ids, align),
        )

    one = ops.convert_to_tensor(1, dtype="int32")
    _, _, _, _, ids, align = ops.while_loop(
        cond, body, (one, tokens, state, done, ids, align)
    )
    return {"ids": ids, "alignment": None if alignment is None else align}


def greedy_search(step_fn, state, start_id, end_id, max_length, banned_ids=()):
    """Greedy decoding: the most likely token at every step.

    Args:
        step_fn: the decoder, `step_fn(tokens, state, index) -> (logits,
            state, alignment)` (see the module docstring).
        state: the decoder's initial state, a nest of batch-first tensors.
        start_id: the token every output starts after.
        end_id: the token that ends an output.
        max_length: the most tokens per output, `end_id` included.
        banned_ids: tokens never emitted. Defaults to `()`.

    Returns:
        A dict: `"ids"` `(B, max_length)` int32 (0 after `end_id`) and
        `"alignment"` `(B, max_length, S)` float32, or `None` when
        `step_fn` returns no alignment.

    Example:

    >>> import numpy as np
    >>> # Row = previous token: start (1) → 3 → end (2).
    >>> table = np.log(np.array([[.1, .1, .7, .1], [.1, .1, .1, .7],
    ...                          [.1, .1, .7, .1], [.1, .1, .7, .1]]))
    >>> def step_fn(tokens, state, index):
    ...     return ops.take(table, tokens, axis=0), state, None
    >>> out = greedy_search(step_fn, np.zeros((1, 1)), 1, 2, 4)
    >>> ops.convert_to_numpy(out["ids"]).tolist()
    [[3, 2, 0, 0]]
    """

    def pick(logits, index):
        return _argmax(logits)

    return _token_search(
        step_fn, state, start_id, end_id, max_length, banned_ids, pick
    )


def sample_search(
    step_fn,
    state,
    start_id,
    end_id,
    max_length,
    temperature=1.0,
    top_k=None,
    seed=None,
    banned_ids=(),
    top_p=None,
):
    """Ancestral sampling with a temperature and optional top-k and top-p
    (nucleus; Holtzman et al. 2020) cuts.

    Each step samples from `softmax(logits / temperature)` restricted to
    the `top_k` most likely tokens, then to the smallest set of most
    likely tokens whose probability reaches `top_p` (KerasHub's
    `TopPSampler`; tokens tied with the last one kept stay in). The
    random numbers (one per output token) are drawn before the loop from
    `seed`, so a fixed integer seed gives the same outputs on every call,
    also under `jax.jit`.

    Args:
        step_fn, state, start_id, end_id, max_length, banned_ids: as in
            `greedy_search`.
        temperature: divides the logits; must be positive. Defaults to
            `1.0`.
        top_k: sample among the `top_k` most likely tokens only. Defaults
            to `None` (all).
        top_p: a probability in `(0, 1]`. Defaults to `None` (no cut).
        seed: an int or a `keras.random.SeedGenerator`. Defaults to
            `None`.

    Returns:
        As `greedy_search`.
    """
    if not temperature > 0:
        raise ValueError(
            "Expected temperature to be positive. "
            f"Received: temperature={temperature!r}"
        )
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(
            "Expected top_k to be a positive integer or None. "
            f"Received: top_k={top_k!r}"
        )
    if top_p is not None and not (
        isinstance(top_p, (int, float)) and 0 < top_p <= 1
    ):
        raise ValueError(
            f"Expected top_p in (0, 1] or None. Received: top_p={top_p!r}"
        )
    batch = _batch_size(state)
    uniform = keras.random.uniform((max_length, batch), seed=seed)

    def pick(logits, index):
        logits = logits / temperature
        if top_k is not None:
            kth = ops.top_k(logits, min(top_k, logits.shape[-1]))[0][:, -1:]
            logits = ops.where(logits < kth, NEG_INF, logits)
        if top_p is not None:
            logits = nucleus(logits, top_p)
        return inverse_cdf(logits, ops.take(uniform, index, axis=0))

    return _token_search(
        step_fn, state, start_id, end_id, max_length, banned_ids, pick
    )


def inverse_cdf(logits, u):
    """A token per row of `logits (B, V)` drawn from their softmax by the
    inverse CDF at the uniform numbers `u (B,)` in `[0, 1)`."""
    cdf = ops.cumsum(ops.softmax(logits, axis=-1), axis=-1)  # (B, V)
    token = ops.sum(ops.cast(cdf < u[:, None] * cdf[:, -1:], "int32"), -1)
    return ops.minimum(token, ops.shape(logits)[-1] - 1)


def nucleus(logits, top_p):
    """`logits (B, V)` with every token outside the nucleus at -1e9: the
    most likely tokens whose probability before them is below `top_p`."""
    logits = ops.convert_to_tensor(logits)
    ranked = ops.top_k(logits, logits.shape[-1])[0]  # (B, V), descending
    probs = ops.softmax(ranked, axis=-1)
    before = ops.cumsum(probs, axis=-1) - probs
    kept = ops.where(before < top_p, ranked, float("inf"))
    last = ops.min(kept, axis=-1, keepdims=True)  # the least likely kept
    return ops.where(logits < last, NEG_INF, logits)


def beam_search(
    step_fn,
    state,
    start_id,
    end_id,
    max_length,
    beam_width=4,
    length_penalty=0.6,
    coverage_penalty=0.0,
    source_mask=None,
    banned_ids=(),
    count_end_token=True,
    coverage_on_finished_only=False,
    return_all_beams=False,
    output_all_scores=False,
):
    """Beam search with the GNMT length and coverage penalties.

    Hypotheses are ranked by `log P(Y|X) / lp(Y) + cp(X; Y)` (Wu et al.
    2016), `lp(Y) = ((5 + |Y|) / 6) ** length_penalty` and
    `cp = coverage_penalty · Σ_i log(min(Σ_t p_ti, 1))` over the source
    positions `i` (the attention `p` comes from `step_fn`'s alignment).
    A finished hypothesis stays in the beam at no further cost; a beam
    wider than the number of hypotheses returns the exhaustive optimum.

    Args:
        step_fn, state, start_id, end_id, max_length, banned_ids: as in
            `greedy_search`. `state` is repeated `beam_width` times along
            the batch axis before the first step.
        beam_width: hypotheses kept per example. Defaults to `4`.
        length_penalty: GNMT `α`; 0 ranks by total log-probability.
            Defaults to `0.6`.
        coverage_penalty: GNMT `β`; needs `step_fn` to return an
            alignment. Defaults to `0.0`.
        source_mask: optional boolean `(B, S)`: the source positions the
            coverage penalty counts (padding excluded). Defaults to
            `None` (all).
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

    Returns:
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
    _check(start_id, end_id, max_length)
    if not isinstance(beam_width, int) or beam_width < 1:
        raise ValueError(
            "Expected beam_width to be a positive integer. "
            f"Received: beam_width={beam_width!r}"
        )
    k = beam_width
    batch = _batch_size(state)
    state = keras.tree.map_structure(lambda x: ops.repeat(x, k, axis=0), state)
    offsets = ops.arange(batch, dtype="int32")[:, None] * k  # (B, 1)
    tokens = _start_tokens(start_id, batch, k)
    zero = ops.convert_to_tensor(0, dtype="int32")
    logits, state, alignment = step_fn(tokens, state, zero)
    if coverage_penalty and alignment is None:
        raise ValueError(
            "coverage_penalty needs step_fn to return an alignment. "
            f"Received: coverage_penalty={coverage_penalty!r} and no alignment"
        )
    vocab = logits.shape[-1]
    pad_only = ops.where(ops.arange(vocab) == 0, 0.0, NEG_INF)  # (V,)
    ends = ops.cast(_is_end(ops.arange(vocab, dtype="int32"), end_id), "bool")
    mask = None
    if source_mask is not None:
        mask = ops.repeat(ops.cast(source_mask, "bool"), k, axis=0)  # (BK, S)

    def coverage(cov):  # (BK, S) -> (B, K)
        if not coverage_penalty:
            return ops.zeros((batch, k), "float32")
        value = coverage_penalty_value(cov, coverage_penalty, mask)
        return ops.reshape(value, (-1, k))

    first = ops.concatenate([ops.zeros((1,)), ops.full((k - 1,), NEG_INF)])
    scores = ops.tile(first[None, :], (batch, 1))  # only beam 0 is live
    lengths = ops.zeros((batch, k), "float32")
    finished = ops.zeros((batch, k), "bool")
    width = 0 if alignment is None else ops.shape(alignment)[-1]
    cov = ops.zeros((batch * k, width), "float32")
    ids = ops.zeros((batch * k, max_length), "int32")
    align = _alignment_buffer(batch * k, max_length, alignment)
    steps = ops.zeros((3, batch, max_length, k), "float32")  # ids, parents, s
    every = ops.zeros(  # all continuations' scores, when asked
        (batch, max_length, k, vocab) if output_all_scores else (1, 1, 1, 1)
    )

    def advance(index, logits, state, alignment, carry):
        scores, lengths, finished, cov, ids, align, steps, _, every = carry
        logp = ops.log_softmax(ban(logits, (0, *banned_ids)), axis=-1)
        logp = ops.reshape(logp, (-1, k, vocab))
        logp = ops.where(finished[..., None], pad_only, logp)
        total = scores[..., None] + logp  # (B, K, V)
        live = ops.cast(ops.logical_not(finished), "float32")[..., None]
        new_len = lengths[..., None] + live  # (B, K, 1)
        if not count_end_token:  # (B, K, V): the end token adds nothing
            new_len = new_len - live * ops.cast(ends, "float32")
        new_len = ops.broadcast_to(new_len, (batch, k, vocab))
        w = _as_alignment(batch * k, alignment)  # (BK, S)
        new_cov = cov + w * ops.reshape(live, (-1, 1))
        cover = coverage(new_cov)[..., None]  # (B, K, 1)
        if coverage_on_finished_only:
            cover = ops.where(
                ops.logical_or(finished[..., None], ends), cover, 0
            )
        ranked = total / length_penalty_factor(new_len, length_penalty) + cover
        best, top = ops.top_k(ops.reshape(ranked, (-1, k * vocab)), k)
        if output_all_scores:
            every = _write(every, index, ranked)
        top = ops.cast(top, "int32")  # (B, K)
        beam, token = top // vocab, top % vocab
        flat = ops.reshape(offsets + beam, (-1,))  # (BK,) rows to keep

        def take(x):
            return ops.take(x, flat, axis=0)

        def pick(x):  # (B, K, V) -> the chosen (B, K)
            return ops.take_along_axis(ops.reshape(x, (-1, k * vocab)), top, 1)

        scores, lengths = pick(total), pick(new_len)
        was_done = ops.reshape(take(ops.reshape(finished, (-1,))), (-1, k))
        finished = ops.logical_or(was_done, _is_end(token, end_id))
        if not count_end_token:  # tfa: the end counts from the next step
            done_now = ops.logical_and(finished, ops.logical_not(was_done))
            lengths = lengths + ops.cast(done_now, "float32")
        if return_all_beams:
            step = ops.stack(
                [ops.cast(token, "float32"), ops.cast(beam, "float32"), best]
            )
            steps = _write(
                ops.reshape(steps, (3 * batch, max_length, k)),
                index,
                ops.reshape(step, (3 * batch, k)),
            )
            steps = ops.reshape(steps, (3, batch, max_length, k))
        token = ops.reshape(token, (-1,))
        ids = _write(take(ids), index, token)
        align = _write(take(align), index, take(w))
        state = keras.tree.map_structure(take, state)
        carry = (scores, lengths, finished, take(new_cov), ids, align, steps)
        return token, state, (*carry, best, every)

    tokens, state, carry = advance(
        zero,
        logits,
        state,
        alignment,
        (scores, lengths, finished, cov, ids, align, steps, scores, every),
    )

    def cond(index, tokens, state, carry):
        more = ops.logical_not(ops.all(carry[2]))
        return ops.logical_and(index < max_length, more)

    def body(index, tokens, state, carry):
        logits, state, alignment = step_fn(tokens, state, index)
        return (index + 1, *advance(index, logits, state, alignment, carry))

    one = ops.convert_to_tensor(1, dtype="int32")
    _, _, _, carry = ops.while_loop(cond, body, (one, tokens, state, carry))
    scores, lengths, finished, cov, ids, align, steps, last, every = carry
    final = scores / length_penalty_factor(lengths, length_penalty)
    cover = coverage(cov)  # (B, K)
    if coverage_on_finished_only:
        cover = ops.where(finished, cover, 0.0)
    final = final + cover
    if not count_end_token:
        # As tfa: the last step's ranking, where an end chosen at that
        # step is not counted yet.
        final = last
    best = ops.cast(_argmax(final), "int32")  # (B,)
    rows = offsets[:, 0] + best
    out = {
        "ids": ops.take(ids, rows, axis=0),
        "alignment": None
        if alignment is None
        else ops.take(align, rows, axis=0),
        "score": ops.take_along_axis(final, best[:, None], axis=1)[:, 0],
    }
    if return_all_beams:
        order = ops.cast(ops.top_k(final, k)[1], "int32")  # (B, K) best first
        beams = ops.reshape(ids, (batch, k, max_length))
        out["beam_ids"] = ops.take_along_axis(beams, order[..., None], axis=1)
        out["beam_scores"] = ops.take_along_axis(final, order, axis=1)
        out["step_ids"] = ops.cast(steps[0], "int32")
        out["parent_ids"] = ops.cast(steps[1], "int32")
        out["step_scores"] = steps[2]
    if output_all_scores:
        out["all_scores"] = every
    return out
