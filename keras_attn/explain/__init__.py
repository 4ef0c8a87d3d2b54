"""Explanations of text classifiers: which words a model used.

`attribute` scores each word a model read by one of several methods
(attention, norm-based attention, gradient × input, integrated gradients,
occlusion, Shapley sampling), on Keras models, SavedModels and the
runtime's LiteRT files; `erasure` says how far to trust a map (ERASER's
comprehensiveness and sufficiency). `attend` reads a model's own
attention back; the drawing functions write pages and pictures.
"""

from keras_attn.explain.attention import (
    attend,
    find_vectorizer,
    own_words,
    top_tokens,
)
from keras_attn.explain.attribution import (
    KerasReader,
    SavedModelReader,
    attribute,
    reader_for,
)
from keras_attn.explain.drawing import (
    GENERATOR,
    OUTPUTS,
    check_outputs,
    heatmap_labels,
    is_our_output,
    pyplot,
    token_spans,
    words_as_written,
    write_alignment_heatmap,
    write_heatmap,
    write_html,
    write_page,
)
from keras_attn_runtime.attribution import (
    DEFAULT_METHOD,
    FRACTIONS,
    METHODS,
    available,
    erasure,
)

__all__ = [
    "DEFAULT_METHOD",
    "FRACTIONS",
    "GENERATOR",
    "METHODS",
    "OUTPUTS",
    "KerasReader",
    "SavedModelReader",
    "attend",
    "attribute",
    "available",
    "check_outputs",
    "erasure",
    "find_vectorizer",
    "heatmap_labels",
    "is_our_output",
    "own_words",
    "pyplot",
    "reader_for",
    "token_spans",
    "top_tokens",
    "words_as_written",
    "write_alignment_heatmap",
    "write_heatmap",
    "write_html",
    "write_page",
]
