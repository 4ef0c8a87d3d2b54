"""Translation on TensorFlow: the `Translator` application around a
`keras_attn.seq2seq` model, and its text pipeline.

`Translator` (text in, text out, in one graph; SavedModel and LiteRT
export), `translation_scores` (BLEU and exact match), parallel text
(`read_pairs`, `split_by_source`, `references`, `word_vocabulary`,
`teacher_forcing_dataset`) and WordPiece subwords (`wordpiece_vocabulary`,
`WordPieceVectorizer`). The modelling it serves (decoder, samplers,
losses) is `keras_attn.seq2seq`'s and backend-agnostic; the LiteRT file's
files are `keras_attn.translation.files`' (written: the folder, the
SavedModel, the one-call and streaming LiteRT files) and
`keras_attn_runtime.translator`'s (read).
"""

from keras_attn.translation.data import (
    read_pairs,
    references,
    split_by_source,
    teacher_forcing_dataset,
    word_vocabulary,
)
from keras_attn.translation.evaluation import translation_scores
from keras_attn.translation.files import export_streaming_translator
from keras_attn.translation.subwords import (
    WordPieceVectorizer,
    wordpiece_vocabulary,
)
from keras_attn.translation.translator import Translator

__all__ = [
    "Translator",
    "WordPieceVectorizer",
    "export_streaming_translator",
    "read_pairs",
    "references",
    "split_by_source",
    "teacher_forcing_dataset",
    "translation_scores",
    "word_vocabulary",
    "wordpiece_vocabulary",
]
