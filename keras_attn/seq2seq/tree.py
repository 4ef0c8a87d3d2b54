"""`gather_tree`: whole beams from per-step beam search records, with
`tfa.seq2seq.gather_tree`'s arguments, layout and edge cases."""

from keras import ops


def gather_tree(step_ids, parent_ids, max_sequence_lengths, end_token):
    """Follow the parent pointers back from the last step of each beam.

    Time-major, as `tfa.seq2seq.gather_tree` (transpose `beam_search`'s
    `(B, T, K)` records with `ops.transpose(x, (1, 0, 2))`). For each
    example and beam, the sequence is read backwards from step
    `max_sequence_lengths[b] − 1`: the token of the current beam, then its
    parent beam at the step before. Steps at or after the length hold
    `end_token`; after a sequence's first `end_token` every step holds
    `end_token`; a parent outside `[0, K)` writes `-1` at that step and
    `end_token` before it (a broken trajectory).

    Args:
        step_ids: int `(T, B, K)`, the token chosen at each step.
        parent_ids: int `(T, B, K)`, the beam each step extended.
        max_sequence_lengths: int `(B,)`.
        end_token: the end id.

    Returns:
        int32 `(T, B, K)`, the full beams. `T` must be static.

    Example:

    >>> import numpy as np
    >>> steps = np.array([[[2, 5]], [[3, 4]], [[6, 7]]])  # (T=3, B=1, K=2)
    >>> parents = np.array([[[0, 0]], [[1, 0]], [[0, 1]]])
    >>> out = gather_tree(steps, parents, np.array([3]), end_token=9)
    >>> ops.convert_to_numpy(out)[:, 0].T.tolist()  # each beam over time
    [[5, 3, 6], [2, 4, 7]]
    """
    step_ids = ops.cast(ops.convert_to_tensor(step_ids), "int32")
    parent_ids = ops.cast(ops.convert_to_tensor(parent_ids), "int32")
    if len(step_ids.shape) != 3 or step_ids.shape[0] is None:
        raise ValueError(
            "Expected step_ids of shape (max_time, batch, beam_width) with "
            f"a static max_time. Received: step_ids.shape={step_ids.shape}"
        )
    steps, width = step_ids.shape[0], ops.shape(step_ids)[2]
    lengths = ops.minimum(
        ops.cast(ops.convert_to_tensor(max_sequence_lengths), "int32"), steps
    )[:, None]  # (B, 1)
    end = ops.cast(end_token, "int32")
    beams = ops.broadcast_to(
        ops.arange(width, dtype="int32")[None], ops.shape(step_ids)[1:]
    )
    broken = ops.zeros_like(beams, dtype="bool")
    out = [None] * steps
    for t in reversed(range(steps)):
        valid = t < lengths  # (B, 1)
        bad = ops.logical_and(
            t < lengths - 1, ops.logical_or(beams < 0, beams >= width)
        )
        safe = ops.clip(beams, 0, width - 1)
        token = ops.take_along_axis(step_ids[t], safe, axis=1)
        token = ops.where(bad, -1, token)
        token = ops.where(
            ops.logical_or(broken, ops.logical_not(valid)), end, token
        )
        out[t] = token
        broken = ops.logical_or(broken, bad)
        parent = ops.take_along_axis(parent_ids[t], safe, axis=1)
        beams = ops.where(valid, parent, beams)
    finished = ops.zeros_like(broken)
    for t in range(steps):
        out[t] = ops.where(finished, end, out[t])
        finished = ops.logical_or(finished, out[t] == end)
    return ops.stack(out, axis=0)
