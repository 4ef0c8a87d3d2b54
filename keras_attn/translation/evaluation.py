"""Scoring a translator: corpus BLEU against every reference, and exact
match.

TensorFlow-only by nature (exact match tokenizes with `split_sentence`, a
`tf.strings` function, as the translators' vectorizers do); BLEU comes from
`sacrebleu` (the `examples` extra).
"""

from keras_attn.text import split_sentence


def _words(texts):
    import tensorflow as tf

    if not texts:
        return []
    split = split_sentence(tf.constant(texts)).numpy()
    return [t.decode().split() for t in split]


def translation_scores(hypotheses, references):
    """Corpus BLEU (sacrebleu, 13a), cased and lowercased, and exact match.

    Args:
        hypotheses: one translation (a string) per source sentence.
        references: for each source sentence, a non-empty list of its
            reference translations; BLEU counts against all of them.

    Returns:
        `{"bleu_cased", "bleu_lowercase", "exact_match", "sentences"}`: the
        two BLEU scores (0-100), the fraction of hypotheses equal to one of
        their references after `split_sentence` tokenization (so spacing
        around punctuation does not count), and the number of sentences.

    Example:

    >>> scores = translation_scores(
    ...     ["Je suis fatigué ."], [["Je suis fatigué.", "Je suis las."]]
    ... )
    >>> round(scores["bleu_cased"], 1), scores["exact_match"]
    (100.0, 1.0)
    """
    try:
        import sacrebleu
    except ImportError as error:  # pragma: no cover - depends on the install
        raise ImportError(
            "translation_scores needs sacrebleu: "
            "pip install -e '.[examples]' in a checkout (docs/install.md)"
        ) from error
    hypotheses, references = list(hypotheses), [list(r) for r in references]
    if len(hypotheses) != len(references):
        raise ValueError(
            "`hypotheses` and `references` must have one entry per sentence; "
            f"received {len(hypotheses)} hypotheses and {len(references)} "
            "reference lists."
        )
    empty = [i for i, refs in enumerate(references) if not refs]
    if empty:
        raise ValueError(
            "Every sentence needs at least one reference; `references` "
            f"entry {empty[0]} is empty."
        )
    if not hypotheses:
        raise ValueError("`hypotheses` is empty: nothing to score.")
    # sacrebleu takes one stream per reference index, None where a
    # sentence has fewer references.
    streams = [
        [refs[j] if j < len(refs) else None for refs in references]
        for j in range(max(map(len, references)))
    ]
    hyp_words = _words(hypotheses)
    same = [
        words in _words(refs)
        for words, refs in zip(hyp_words, references, strict=True)
    ]
    return {
        "bleu_cased": sacrebleu.corpus_bleu(hypotheses, streams).score,
        "bleu_lowercase": sacrebleu.corpus_bleu(
            hypotheses, streams, lowercase=True
        ).score,
        "exact_match": sum(same) / len(same),
        "sentences": len(hypotheses),
    }
