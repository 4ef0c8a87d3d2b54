"""Sequence-to-sequence on Keras 3: an attention decoder and searches.

Backend-agnostic (`keras.ops`): `AttentionDecoder`, `SequenceLoss`,
`greedy_search`, `sample_search`, `beam_search`, `contrastive_search`,
`multilabel_search` (functions over the serializable strategies of
`keras_attn.seq2seq.samplers`, one loop) and `ensemble` (several models
decoding as one). The TensorFlow application around it (`Translator`,
`translation_scores`, parallel text, WordPiece subwords) is
`keras_attn.translation`; its names are still reached from here (with a
`DeprecationWarning`, `keras_attn.legacy.seq2seq`).
"""

from keras_attn.legacy import seq2seq as legacy_seq2seq
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
    return legacy_seq2seq.moved(__name__, name)
