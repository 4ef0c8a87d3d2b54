"""Parallel text for training and evaluation.

`read_pairs`, `split_by_source` and `references` read a corpus of
sentence pairs, hold out whole source sentences and group their
references; `word_vocabulary` builds a vocabulary that leaves numbers to
be copied; `teacher_forcing_dataset` batches `((source, target_in),
target_out)`. TensorFlow-only by nature (`tf.data`, the input pipeline
Keras's `fit` reads on every backend), imported on first use.
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


def read_pairs(path, limit=None):
    """`(source, target)` pairs from a UTF-8 file of `source<TAB>target`
    lines (e.g. Tatoeba's `fra.txt`); other columns and incomplete lines
    are skipped. `limit` keeps the first pairs only."""
    import os

    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"Expected path to be a file of source<TAB>target lines. "
            f"Received: path={path!r}, which is not a file"
        )
    with open(path, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    return [(r[0], r[1]) for r in rows if len(r) > 1 and r[0] and r[1]][:limit]


def split_by_source(pairs, val_fraction, seed):
    """Train and validation pairs with no source sentence on both sides.

    A fraction `val_fraction` of the distinct source sentences, drawn with
    `seed`, goes to validation with all its translations (the references
    for BLEU), so validation measures sentences never seen in training.
    """
    import numpy as np

    if not 0 < val_fraction < 1:
        raise ValueError(
            f"`val_fraction` must be in (0, 1); received {val_fraction!r}."
        )
    sources = sorted({s for s, _ in pairs})
    order = np.random.default_rng(seed).permutation(len(sources))
    held = {
        sources[i] for i in order[: max(1, int(len(sources) * val_fraction))]
    }
    return (
        [p for p in pairs if p[0] not in held],
        [p for p in pairs if p[0] in held],
    )


def references(pairs):
    """The distinct sources, sorted, and the list of targets of each."""
    grouped = {}
    for source, target in pairs:
        grouped.setdefault(source, []).append(target)
    sources = sorted(grouped)
    return sources, [grouped[s] for s in sources]


def word_vocabulary(texts, max_tokens, standardize, reserved=(), exclude=r"\d"):
    """The most frequent words of `texts`, for a `TextVectorization`.

    Words matching the regex `exclude` (by default any word with a digit)
    never enter it: they become `[UNK]`, which a `Translator` replaces by
    the source word the attention points at, so numbers are copied rather
    than translated. The list starts with `reserved` (e.g. start and end
    tokens) and leaves room for the padding and `[UNK]` entries that
    `TextVectorization` adds: `max_tokens − 2` words in all.

    Args:
        texts: a list of strings.
        max_tokens: the vocabulary size the vectorizer will have.
        standardize: a function of a string tensor returning the
            standardized strings, words separated by spaces (e.g.
            `keras_attn.text.split_sentence`).
        reserved: words placed first. Defaults to `()`.
        exclude: a regex; matching words are left out. Defaults to
            `r"\\d"`.
    """
    import collections
    import re

    import tensorflow as tf

    words = standardize(tf.constant(list(texts))).numpy()
    counts = collections.Counter(w for t in words for w in t.decode().split())
    kept = [w for w, _ in counts.most_common() if not re.search(exclude, w)]
    kept = [w for w in kept if w not in reserved]
    return list(reserved) + kept[: max_tokens - 2 - len(reserved)]
