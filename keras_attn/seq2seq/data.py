"""Batches for teacher forcing: `((source, target_in), target_out)`.

TensorFlow-only by nature (`tf.data`, the input pipeline Keras's `fit`
reads on every backend).
"""


def teacher_forcing_dataset(
    source_ids,
    target_ids,
    batch_size,
    seed=None,
    bucket_boundaries=(5, 7, 9, 12),
):
    """A `tf.data.Dataset` of `((source, target_in), target_out)` batches.

    `target_ids` hold `start … end` ids, zero-padded on the right;
    `target_in` is each row without its last position and `target_out`
    without its first, so step `t` predicts token `t + 1` from tokens
    `≤ t`. Sentences are grouped by target length
    (`bucket_by_sequence_length`) and each batch is cut to its longest
    source and target, so short sentences do not pay for long ones.

    Args:
        source_ids: int array `(N, S)`, zero-padded on the right.
        target_ids: int array `(N, T + 1)`, zero-padded on the right.
        batch_size: sentences per batch.
        seed: shuffle with this seed (training); `None` keeps the order
            (validation). Defaults to `None`.
        bucket_boundaries: target lengths (non-zero ids) where buckets
            split. Defaults to `(5, 7, 9, 12)`.

    Returns:
        The dataset, prefetched.
    """
    import tensorflow as tf

    source_ids = tf.convert_to_tensor(source_ids)
    target_ids = tf.convert_to_tensor(target_ids)
    if source_ids.shape.rank != 2 or target_ids.shape.rank != 2:
        raise ValueError(
            "`source_ids` and `target_ids` must be 2-D `(sentences, length)`; "
            f"received shapes {source_ids.shape} and {target_ids.shape}."
        )
    if source_ids.shape[0] != target_ids.shape[0]:
        raise ValueError(
            "`source_ids` and `target_ids` must hold the same sentences; "
            f"received {source_ids.shape[0]} and {target_ids.shape[0]} rows."
        )
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(
            f"`batch_size` must be a positive integer; received {batch_size!r}."
        )
    ds = tf.data.Dataset.from_tensor_slices((source_ids, target_ids))
    if seed is not None:
        ds = ds.shuffle(int(source_ids.shape[0]), seed=seed)
    boundaries = list(bucket_boundaries)
    ds = ds.bucket_by_sequence_length(
        lambda s, t: tf.cast(tf.math.count_nonzero(t), tf.int32),
        bucket_boundaries=boundaries,
        bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
    )

    def trim(s, t):
        s = s[:, : tf.reduce_max(tf.math.count_nonzero(s, axis=1))]
        t = t[:, : tf.reduce_max(tf.math.count_nonzero(t, axis=1))]
        return (s, t[:, :-1]), t[:, 1:]

    return ds.map(trim).prefetch(tf.data.AUTOTUNE)
