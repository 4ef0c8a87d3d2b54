"""`Attention`'s arguments and inputs: checks, Keras's list convention
(`layer([query, value(, key)], mask=[...])`) and N-D inputs."""

from keras import ops

from keras_attn.ops import scores
from keras_attn.validation import check_rate, positive_int, set_output_mask


def check_arguments(
    score,
    units,
    rank,
    dropout,
    chunk_size,
    use_scale,
    normalize,
    use_bias,
    score_mode,
):
    """Raise, naming the argument, on a bad constructor argument; return
    the score (Keras's `score_mode` resolved)."""
    if score_mode is not None:  # Keras's name for the two it has
        if score_mode not in ("dot", "concat"):
            raise ValueError(
                "Invalid value for argument score_mode. Expected one of "
                "{'dot', 'concat'} (or give `score`: any of "
                f"{scores.SCORES}). Received: score_mode={score_mode!r}"
            )
        if score not in ("dot", score_mode):
            raise ValueError(
                "Give score or score_mode, not both. Received: "
                f"score={score!r}, score_mode={score_mode!r}"
            )
        score = score_mode
    if score not in scores.SCORES:
        raise ValueError(
            f"Expected score to be one of {scores.SCORES}. "
            f"Received: score={score!r}"
        )
    if score == "additive":
        positive_int("units", units)
    else:
        positive_int("units", units, allow_none=True)
    if score == "low_rank":
        positive_int("rank", rank)
    else:
        positive_int("rank", rank, allow_none=True)
    check_rate("dropout", dropout)
    positive_int("chunk_size", chunk_size, allow_none=True)
    if use_scale and score == "additive":
        raise ValueError(
            "The additive score is already scaled by its learned `v`: "
            "use_scale is for the multiplicative scores. Received: "
            "score='additive', use_scale=True"
        )
    if normalize and (score != "additive" or not use_bias):
        raise ValueError(
            "normalize is weight normalization of the additive score's "
            "v, with its bias. Received: "
            f"score={score!r}, use_bias={use_bias!r}, normalize=True"
        )
    return score


def check_build_shapes(score, query_shape, value_shape, key_shape):
    """Raise unless the shapes are `(B, ..., T, D)` of one rank and, for
    the weight-free scores, query and key are as wide."""
    for name, shape in (
        ("query", query_shape),
        ("value", value_shape),
        ("key", key_shape),
    ):
        if len(shape) < 3:
            raise ValueError(
                f"Expected {name} to have rank 3 (batch, time, "
                "features) or more (batch, ..., time, features). "
                f"Received: {name}.shape={tuple(shape)}"
            )
    if len({len(query_shape), len(value_shape), len(key_shape)}) > 1:
        raise ValueError(
            "Expected query, value and key of the same rank. Received: "
            f"query.shape={tuple(query_shape)}, "
            f"value.shape={tuple(value_shape)}, "
            f"key.shape={tuple(key_shape)}"
        )
    dq, dk = query_shape[-1], key_shape[-1]
    if score in ("dot", "scaled_dot", "concat") and dq != dk:
        raise ValueError(
            f'score="{score}" needs query and key of the same '
            f"width. Received: query.shape={tuple(query_shape)}, "
            f"key.shape={tuple(key_shape)}"
        )


def check_projected_key(score, projects_keys, projected_key, query):
    """A `ValueError` for a `projected_key` the layer cannot read: its
    score projects no keys, or the query has more than three axes."""
    if projected_key is None:
        return
    if not projects_keys:
        raise ValueError(
            f'Expected no projected_key: score="{score}" does not project '
            "its keys (`project_key` gives None). Received: projected_key "
            f"of shape {projected_key.shape}"
        )
    if len(query.shape) > 3:
        raise ValueError(
            "Expected a query of rank 3 with projected_key. Received: "
            f"query of shape {query.shape}"
        )


def split(inputs, name):
    """`[query, value]` or `[query, value, key]` (Keras's `Attention`
    convention) as `(query, value, key)`."""
    if (
        not isinstance(inputs, (list, tuple))
        or len(inputs) not in (2, 3)
        or any(x is None or isinstance(x, int) for x in inputs)  # one shape
    ):
        raise ValueError(
            "Attention must be called on a list [query, value] or [query, "
            "value, key] (length 2 or 3), as keras.layers.Attention takes, "
            f"or with `value`. Received: {name}={inputs!r}"
        )
    query, value, *rest = inputs
    return query, value, (rest[0] if rest else None)


def keras_convention(inputs, query_mask, value_mask, mask):
    """`(query, value, key, query_mask, value_mask)` from Keras's
    `layer([query, value(, key)], mask=[query_mask, value_mask])`; Keras
    itself may hand the list of masks over as `query_mask`."""
    query, value, key = split(inputs, "inputs")
    if isinstance(query_mask, (list, tuple)):
        mask, query_mask = (query_mask if mask is None else mask), None
    if mask is not None:
        if not isinstance(mask, (list, tuple)) or len(mask) not in (2, 3):
            raise ValueError(
                "With list inputs the layer mask must be a list [query_mask, "
                "value_mask] (length 2 or 3), as keras.layers.Attention "
                f"takes. Received: mask={mask!r}"
            )
        query_mask = mask[0] if query_mask is None else query_mask
        value_mask = mask[1] if value_mask is None else value_mask
    return query, value, key, query_mask, value_mask


def call_nd(
    call,
    query,
    value,
    key,
    query_mask,
    value_mask,
    use_causal_mask,
    return_attention_scores,
    training,
):
    """`call` on `(B, ..., T, D)` inputs, as `keras.layers.Attention`
    takes them: every axis before the time axis is a batch axis."""
    if len(value.shape) != len(query.shape):
        raise ValueError(
            "Expected query and value of the same rank. Received: "
            f"query.shape={tuple(query.shape)}, "
            f"value.shape={tuple(value.shape)}"
        )
    lead = ops.shape(query)[:-2]

    def flat(x, keep):
        if x is None:
            return None
        shape = ops.shape(x)
        return ops.reshape(x, (-1, *shape[len(shape) - keep :]))

    result = call(
        flat(query, 2),
        flat(value, 2),
        flat(key, 2),
        query_mask=flat(query_mask, 1),
        value_mask=flat(value_mask, 1),
        use_causal_mask=use_causal_mask,
        return_attention_scores=return_attention_scores,
        training=training,
    )
    context, weights = result if return_attention_scores else (result, 0)
    context = ops.reshape(context, (*lead, *ops.shape(context)[1:]))
    set_output_mask(context, query_mask)
    if not return_attention_scores:
        return context
    return context, ops.reshape(weights, (*lead, *ops.shape(weights)[1:]))
