"""Sequence-to-sequence on Keras 3: an attention decoder and searches.

Backend-agnostic (`keras.ops`): `AttentionDecoder`, `SequenceLoss`,
`greedy_search`, `sample_search`, `beam_search`, `contrastive_search`,
`multilabel_search` (functions over the serializable strategies of
`keras_attn.seq2seq.samplers`, one loop) and `ensemble` (several models
decoding as one). The TensorFlow application around it (`Translator`,
`translation_scores`, parallel text, WordPiece subwords) is
`keras_attn.translation`; its names are still reached from here (with a
`DeprecationWarning`), and imported on first use.
"""

import importlib
import warnings

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


# Names that moved to `keras_attn.translation` (TensorFlow only).
MOVED = {
    "Translator",
    "translation_scores",
    "teacher_forcing_dataset",
    "read_pairs",
    "split_by_source",
    "references",
    "word_vocabulary",
    "serving",
    "data",
    "evaluation",
    "segmenting",
    "subwords",
}


def __getattr__(name):
    if name not in MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    new = "keras_attn.translation"
    warnings.warn(
        f"keras_attn.seq2seq.{name} moved to {new}: import it from there.",
        DeprecationWarning,
        stacklevel=2,
    )
    if name == "serving":
        return importlib.import_module(f"{new}.translator")
    if name in ("data", "evaluation", "segmenting", "subwords"):
        return importlib.import_module(f"{new}.{name}")
    return getattr(importlib.import_module(new), name)
