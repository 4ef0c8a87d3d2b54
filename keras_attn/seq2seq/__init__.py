"""Sequence-to-sequence on Keras 3: an attention decoder and searches.

Backend-agnostic (`keras.ops`): `AttentionDecoder`, `SequenceLoss`,
`greedy_search`, `sample_search`, `beam_search`, `contrastive_search`,
`multilabel_search` (functions over the serializable strategies of
`keras_attn.seq2seq.samplers`, one loop) and `ensemble` (several models
decoding as one). TensorFlow-only serving
(`Translator`, with SavedModel and LiteRT export) lives in
`keras_attn.seq2seq.serving`, scoring (`translation_scores`, BLEU and
exact match) in `keras_attn.seq2seq.evaluation`, parallel text
(`read_pairs`, `split_by_source`, `references`, `word_vocabulary`,
`teacher_forcing_dataset`) in `keras_attn.seq2seq.data`; they are imported
from here on first use.
"""

from keras_attn.seq2seq import samplers
from keras_attn.seq2seq.attention_decoder import AttentionDecoder
from keras_attn.seq2seq.ensemble import ensemble
from keras_attn.seq2seq.losses import SequenceLoss
from keras_attn.seq2seq.monotonic import (
    MonotonicAttention,
    initial_alignment,
    monotonic_attention,
)
from keras_attn.seq2seq.scheduled import ScheduledSampling
from keras_attn.seq2seq.search import (
    beam_search,
    contrastive_search,
    greedy_search,
    multilabel_search,
    sample_search,
)
from keras_attn.seq2seq.tree import gather_tree

__all__ = [
    "AttentionDecoder",
    "MonotonicAttention",
    "ScheduledSampling",
    "SequenceLoss",
    "beam_search",
    "contrastive_search",
    "ensemble",
    "gather_tree",
    "greedy_search",
    "initial_alignment",
    "monotonic_attention",
    "multilabel_search",
    "sample_search",
    "samplers",
]


def __getattr__(name):
    if name == "Translator":
        from keras_attn.seq2seq import serving

        return getattr(serving, name)
    if name == "translation_scores":
        from keras_attn.seq2seq import evaluation

        return getattr(evaluation, name)
    if name in (
        "teacher_forcing_dataset",
        "read_pairs",
        "split_by_source",
        "references",
        "word_vocabulary",
    ):
        from keras_attn.seq2seq import data

        return getattr(data, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
