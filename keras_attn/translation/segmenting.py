"""Cutting long inputs into pieces in the TensorFlow graph, and putting
the pieces' translations back together (`Translator(segmenter=...)`).

The same cuts as `keras_attn_runtime.segments` (Python `re`), with RE2
and plain tensors: no ragged tensor, whose shape checks would add about
half a megabyte to each SavedModel signature.
"""

import tensorflow as tf

from keras_attn_runtime import segmenter as find_segmenter


def check(segmenter, longer_than):
    """A `ValueError` naming the argument for an unknown `segmenter` (not
    `None` nor a `SEGMENTERS` name) or a `segment_longer_than` that is not
    a positive integer."""
    if segmenter is not None:
        find_segmenter(segmenter, "segmenter")
    if (
        isinstance(longer_than, bool)
        or not isinstance(longer_than, int)
        or longer_than < 1
    ):
        raise ValueError(
            "Expected segment_longer_than to be a positive integer. "
            f"Received: segment_longer_than={longer_than!r}"
        )


def cut(text, segmenter, longer_than):
    """`text` `(B,)` cut by the `keras_attn_runtime.SEGMENTERS` entry
    `segmenter` (stage after stage, on pieces of more than `longer_than`
    words): the pieces `(P,)` in order, each piece after the first of its
    input capitalized, and the input each comes from `(P,)`."""
    space = "[\t\n\f\r ]+"
    pieces = tf.strings.strip(tf.strings.regex_replace(text, space, " "))
    rows = tf.range(tf.size(pieces, tf.int64))
    for rules in find_segmenter(segmenter):
        spaces = tf.strings.length(pieces) - tf.strings.length(
            tf.strings.regex_replace(pieces, " ", "")
        )
        cuts = pieces
        for pattern, rewrite in rules:
            cuts = tf.strings.regex_replace(cuts, pattern, rewrite)
        long = spaces + 1 > longer_than
        split = tf.raw_ops.StringSplitV2(
            input=tf.where(long, cuts, pieces), sep="\n"
        )
        rows = tf.gather(rows, split.indices[:, 0])
        pieces = tf.strings.strip(split.values)
    kept = tf.where(pieces != "")[:, 0]
    pieces, rows = tf.gather(pieces, kept), tf.gather(rows, kept)
    # Whether each piece follows another of its input (none for P = 0).
    later = tf.concat([[False], rows[1:] == rows[:-1]], axis=0)[: tf.size(rows)]
    chars = tf.strings.length(pieces, unit="UTF8_CHAR")
    one = tf.fill(tf.shape(chars), 1)
    head = tf.strings.substr(pieces, one - 1, one, unit="UTF8_CHAR")
    tail = tf.strings.substr(pieces, one, chars - 1, unit="UTF8_CHAR")
    upper = tf.strings.upper(head, encoding="utf-8") + tail
    return tf.where(later, upper, pieces), rows


def join(out, rows, batch, source_length):
    """One result per input from the pieces' results `out` (a
    `Translator` signature's outputs for the `(P,)` pieces): the
    translations joined, the tokens one piece after the other, the
    attention block-diagonal, `source_truncated` when any piece was, and
    the number of `pieces` and the `source_length` a piece may have."""
    ones = tf.fill(tf.shape(rows), tf.constant(1, tf.int64))
    count = tf.math.unsorted_segment_sum(ones, rows, batch)
    truncated = tf.math.unsorted_segment_sum(
        tf.cast(out["source_truncated"], tf.int64), rows, batch
    )
    joined = tf.strings.unsorted_segment_join(
        out["translation"], rows, batch, separator=" "
    )
    result = {
        "translation": tf.strings.strip(joined),
        "source_truncated": truncated > 0,
        # The attention's width is no longer the tokens the model reads.
        "pieces": tf.cast(count, tf.int32),
        "source_length": tf.fill(
            tf.reshape(batch, [1]), tf.constant(source_length, tf.int32)
        ),
    }
    lengths = {}
    for key in ("target_tokens", "source_tokens"):
        lengths[key], result[key] = _concatenated(out[key], rows, batch)
    result["attention"] = _block_diagonal(
        out["attention"],
        rows,
        batch,
        lengths["target_tokens"],
        lengths["source_tokens"],
    )
    return result


def _concatenated(tokens, rows, batch):
    """The pieces' tokens `(P, T)` (each piece's first, then `""`) one
    piece after the other per input, `(B, longest)` padded with `""`;
    and each piece's token count `(P,)`."""
    present = tokens != ""
    lengths = tf.reduce_sum(tf.cast(present, tf.int64), axis=1)
    values = tf.gather_nd(tokens, tf.where(present))  # in order
    per_input = tf.math.unsorted_segment_sum(lengths, rows, batch)
    first = tf.cumsum(per_input, exclusive=True)
    k = tf.range(tf.reduce_max(tf.concat([per_input, [0]], 0)))
    inside = k[None, :] < per_input[:, None]
    at = tf.where(inside, first[:, None] + k[None, :], 0)
    values = tf.concat([values, [""]], axis=0)  # never an empty gather
    return lengths, tf.where(inside, tf.gather(values, at), "")


def _block_diagonal(attention, rows, batch, target, source):
    """The pieces' attention `(P, L, S)` as one `(B, sum L_p, sum S_p)`
    map per input: piece `p`'s first `target[p]` rows and `source[p]`
    columns, placed after its input's earlier pieces (`rows`: each
    piece's input, in order)."""

    def offsets(lengths):  # within the input, (P,)
        before = tf.cumsum(lengths, exclusive=True)
        firsts = tf.cumsum(
            tf.math.unsorted_segment_sum(lengths, rows, batch),
            exclusive=True,
        )
        return before - tf.gather(firsts, rows)

    t0, s0 = offsets(target), offsets(source)
    shape = tf.shape(attention, out_type=tf.int64)
    i = tf.range(shape[1])[None, :, None]
    j = tf.range(shape[2])[None, None, :]
    inside = (i < target[:, None, None]) & (j < source[:, None, None])
    at = tf.where(inside)  # (N, 3): piece, row, column
    p = at[:, 0]
    index = tf.stack(
        [
            tf.gather(rows, p),
            tf.gather(t0, p) + at[:, 1],
            tf.gather(s0, p) + at[:, 2],
        ],
        axis=1,
    )

    def widest(lengths):
        per_input = tf.math.unsorted_segment_sum(lengths, rows, batch)
        return tf.reduce_max(tf.concat([per_input, [0]], axis=0))

    return tf.scatter_nd(
        index,
        tf.gather_nd(attention, at),
        tf.stack([batch, widest(target), widest(source)]),
    )
