"""Greedy, sampling, beam, contrastive and multi-label search as
functions: each runs its `keras_attn.seq2seq.samplers` strategy.

A decoder is one function,

    step_fn(tokens (B,), state, index) -> (logits (B, V), state, alignment)

(`samplers.base` says more, with the token conventions: outputs start
after `start_id`, end with `end_id` kept, padding 0 after it; `banned_ids`
and padding are never emitted). The searches trace under `jax.jit` and
`tf.function` and run eagerly on PyTorch.
"""

from keras_attn.seq2seq.samplers import (
    BeamSampler,
    ContrastiveSampler,
    GreedySampler,
    MultiLabelSampler,
    RandomSampler,
    TopKSampler,
    TopPSampler,
)
from keras_attn.seq2seq.samplers.random import check_top_k


def greedy_search(
    step_fn,
    state,
    start_id,
    end_id,
    max_length,
    banned_ids=(),
    alignment_length=None,
):
    """Greedy decoding: the most likely token at every step
    (`samplers.GreedySampler`).

    Args:
        step_fn: the decoder, `step_fn(tokens, state, index) -> (logits,
            state, alignment)` (see the module docstring).
        state: the decoder's initial state, a nest of batch-first tensors.
        start_id: the token every output starts after: an int or `(B,)`.
        end_id: the token that ends an output, or a list: any of them.
        max_length: the most tokens per output, `end_id` included.
        banned_ids: tokens never emitted. Defaults to `()`.
        alignment_length: the alignment's length. Optional: a traced
            graph with a variable source length reads it from the first
            step. Defaults to `None`.

    Returns:
        A dict: `"ids"` `(B, max_length)` int32 (0 after `end_id`) and
        `"alignment"` `(B, max_length, S)` float32, or `None` when
        `step_fn` returns no alignment.
    """
    return GreedySampler()(
        step_fn,
        state,
        start_id,
        end_id,
        max_length,
        banned_ids,
        alignment_length=alignment_length,
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
    (nucleus; Holtzman et al. 2020) cuts: `samplers.RandomSampler`,
    `TopKSampler` or `TopPSampler`.

    Each step samples from `softmax(logits / temperature)` restricted to
    the `top_k` most likely tokens, then to the smallest set of most
    likely tokens whose probability reaches `top_p` (tokens tied with the
    last one kept stay in). The random numbers (one per output token) are
    drawn before the loop from `seed`, so a fixed integer seed gives the
    same outputs on every call, also under `jax.jit`.

    Args:
        step_fn: as in `greedy_search`.
        state: as in `greedy_search`.
        start_id: as in `greedy_search`.
        end_id: as in `greedy_search`.
        max_length: as in `greedy_search`.
        banned_ids: as in `greedy_search`.
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
    check_top_k(top_k, "top_k")
    if top_p is not None and not (
        isinstance(top_p, (int, float)) and 0 < top_p <= 1
    ):
        raise ValueError(
            f"Expected top_p in (0, 1] or None. Received: top_p={top_p!r}"
        )
    if top_p is not None:
        sampler = TopPSampler(top_p, top_k, temperature, seed)
    elif top_k is not None:
        sampler = TopKSampler(top_k, temperature, seed)
    else:
        sampler = RandomSampler(temperature, seed)
    return sampler(step_fn, state, start_id, end_id, max_length, banned_ids)


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
    alignment_length=None,
):
    """Beam search with the GNMT length and coverage penalties
    (`samplers.BeamSampler`, whose docstring gives the ranking, tfa's
    conventions and the outputs).

    Args:
        step_fn: as in `greedy_search`.
        state: as in `greedy_search`.
        start_id: as in `greedy_search`.
        end_id: as in `greedy_search`.
        max_length: as in `greedy_search`.
        banned_ids: as in `greedy_search`.
        alignment_length: as in `greedy_search`.
        beam_width: as in `BeamSampler`.
        length_penalty: as in `BeamSampler`.
        coverage_penalty: as in `BeamSampler`.
        count_end_token: as in `BeamSampler`.
        coverage_on_finished_only: as in `BeamSampler`.
        return_all_beams: as in `BeamSampler`.
        output_all_scores: as in `BeamSampler`.
        source_mask: optional boolean `(B, S)`: the source positions the
            coverage penalty counts (padding excluded). Defaults to
            `None` (all).

    Returns:
        A dict: the best hypothesis per example, `"ids"` `(B, max_length)`,
        `"alignment"` `(B, max_length, S)` (or `None`) and `"score"`
        `(B,)`, its penalized score; more entries with `return_all_beams`
        or `output_all_scores` (see `BeamSampler`).
    """
    sampler = BeamSampler(
        beam_width,
        length_penalty,
        coverage_penalty,
        count_end_token,
        coverage_on_finished_only,
        return_all_beams,
        output_all_scores,
    )
    return sampler(
        step_fn,
        state,
        start_id,
        end_id,
        max_length,
        banned_ids,
        source_mask,
        alignment_length,
    )


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
    """Contrastive search (Su et al. 2022): `samplers.ContrastiveSampler`.

    At each step the `top_k` most likely tokens `v` are fed to the decoder
    (one batched call) and the one maximizing
    `(1 − alpha) · p(v) − alpha · max_j cos(h_v, h_j)` is kept, `h_j`
    running over the start token and every token kept so far.

    Args:
        step_fn: as in `greedy_search`.
        state: as in `greedy_search`.
        start_id: as in `greedy_search`.
        end_id: as in `greedy_search`.
        max_length: as in `greedy_search`.
        banned_ids: as in `greedy_search`.
        hidden_fn: `hidden_fn(state) -> (B, D)`, the representation of
            the token `step_fn` has just read, from the state it returned.
        top_k: candidates per step. Defaults to `5`.
        alpha: weight of the degeneration penalty, in `[0, 1]`. Defaults
            to `0.6`.

    Returns:
        As `greedy_search`.

    Example:

    >>> import numpy as np
    >>> from keras import ops
    >>> # Row = previous token; the state is the token read, one-hot.
    >>> table = np.log(np.array([[.1, .1, .7, .1], [.1, .1, .1, .7],
    ...                          [.1, .1, .7, .1], [.1, .3, .3, .3]]))
    >>> def step_fn(tokens, state, index):
    ...     return ops.take(table, tokens, axis=0), ops.one_hot(tokens, 4), None
    >>> out = contrastive_search(step_fn, np.zeros((1, 4)), 1, 2, 4,
    ...                          hidden_fn=lambda state: state, top_k=3)
    >>> ops.convert_to_numpy(out["ids"]).tolist()
    [[3, 2, 0, 0]]
    """
    check_top_k(top_k, "top_k", none_ok=False)
    sampler = ContrastiveSampler(top_k, alpha)
    return sampler(
        step_fn,
        state,
        start_id,
        end_id,
        max_length,
        banned_ids,
        hidden_fn=hidden_fn,
    )


def multilabel_search(
    step_fn,
    state,
    start_inputs,
    max_length,
    end_fn=None,
    threshold=None,
    seed=None,
):
    """Multi-label decoding, each step's labels drawn independently (tfa's
    `InferenceSampler` with a Bernoulli `sample_fn`):
    `samplers.MultiLabelSampler`, whose docstring gives the decoder's form
    and the outputs.

    Args:
        step_fn: `step_fn(inputs (B, V), state, index) -> (logits (B, V),
            state, alignment)`.
        state: the decoder's initial state, a nest of batch-first tensors.
        start_inputs: the first step's input, `(B, V)`.
        max_length: the most steps per output.
        end_fn: `end_fn(labels (B, V)) -> (B,)` booleans: the output ends
            with this step. Defaults to `None`.
        threshold: a probability in `(0, 1)` for deterministic labels.
            Defaults to `None` (sampled).
        seed: an int or a `keras.random.SeedGenerator`. Defaults to
            `None`.

    Returns:
        A dict: `"labels"` `(B, max_length, V)`, `"lengths"` `(B,)` and
        `"alignment"` `(B, max_length, S)` or `None`.
    """
    sampler = MultiLabelSampler(threshold, seed)
    return sampler(step_fn, state, start_inputs, max_length, end_fn)
