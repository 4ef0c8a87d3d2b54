"""Ensembles of step-wise decoders for the searches, `keras.ops`."""

import math

from keras import ops


def _log_weights(members, weights):
    """The members' log weights, normalized; a `ValueError` naming the
    argument for members that are not `(encode, step_fn)` pairs or
    weights that are not one non-negative number each, not all zero."""
    if not members or any(
        not isinstance(m, (tuple, list)) or len(m) != 2 for m in members
    ):
        raise ValueError(
            "Expected members to be a non-empty list of (encode, step_fn) "
            f"pairs. Received: members={members!r}"
        )
    if weights is None:
        weights = [1.0] * len(members)
    weights = [float(w) for w in weights]
    if len(weights) != len(members) or min(weights) < 0 or sum(weights) <= 0:
        raise ValueError(
            f"Expected {len(members)} non-negative weights, not all zero. "
            f"Received: weights={weights!r}"
        )
    return [math.log(w / sum(weights)) if w > 0 else -math.inf for w in weights]


def ensemble(members, weights=None):
    """One `(encode, step_fn)` pair that decodes with several models.

    Each step's output is the log of the weighted mean of the members'
    next-token probabilities, `log Σ_k w_k softmax(logits_k)`, and the
    alignment is the weighted mean of theirs; so any search
    (`greedy_search`, `sample_search`, `beam_search`) and a `Translator`
    decode with the ensemble as with one model. The members must share the
    source and target vocabularies; their states may differ.

    Args:
        members: a list of `(encode, step_fn)` pairs in the form the
            searches take (see `keras_attn.seq2seq.search`).
        weights: one non-negative weight per member, normalized to sum to
            1. Defaults to `None` (equal weights).

    Returns:
        `(encode, step_fn)`: `encode(source)` gives the tuple of the
        members' states; `step_fn(tokens, state, index)` gives
        `(log-probabilities (B, V), state, alignment (B, S) or None)`.

    Example:

    >>> import numpy as np
    >>> def member(bias):
    ...     def encode(source):
    ...         return {"memory": source}
    ...     def step_fn(tokens, state, index):
    ...         return np.array([[0.0, bias]]), state, None
    ...     return encode, step_fn
    >>> encode, step_fn = ensemble([member(0.0), member(2.0)])
    >>> logp, _, _ = step_fn(np.array([1]), encode(np.zeros((1, 3))), 0)
    >>> np.round(np.exp(np.asarray(logp)), 3)  # mean of the two softmaxes
    array([[0.31, 0.69]], dtype=float32)
    """
    members = list(members)
    log_w = _log_weights(members, weights)

    def encode(source):
        return tuple(m[0](source) for m in members)

    def step_fn(tokens, state, index):
        logps, states, alignments = [], [], []
        for (_, member_step), member_state, lw in zip(
            members, state, log_w, strict=True
        ):
            logits, member_state, alignment = member_step(
                tokens, member_state, index
            )
            logits = ops.cast(logits, "float32")
            logps.append(ops.log_softmax(logits, axis=-1) + lw)
            states.append(member_state)
            alignments.append(alignment)
        logp = ops.logsumexp(ops.stack(logps), axis=0)
        alignment = None
        if all(a is not None for a in alignments):
            alignment = sum(
                math.exp(lw) * ops.cast(a, "float32")
                for a, lw in zip(alignments, log_w, strict=True)
                if lw > -math.inf
            )
        return logp, tuple(states), alignment

    return encode, step_fn
