"""Deprecated: the edge runtime moved to `keras_attn_runtime` (no Keras, no
TensorFlow). This module re-exports it for one release."""

import warnings

from keras_attn_runtime import *  # noqa: F403
from keras_attn_runtime import __all__  # noqa: F401
from keras_attn_runtime.artifact import _count_tables, _model_object  # noqa
from keras_attn_runtime.classifier import _interpreter  # noqa: F401

warnings.warn(
    "keras_attn.litert_runtime moved to keras_attn_runtime; the old path "
    "goes away in the next release.",
    DeprecationWarning,
    stacklevel=2,
)
