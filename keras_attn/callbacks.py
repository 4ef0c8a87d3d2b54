"""Deprecated path, an alias of the module that moved:
`keras_attn.training.callbacks`. It goes away in the next release."""

import sys
import warnings

from keras_attn.training import callbacks as moved

warnings.warn(
    "keras_attn.callbacks moved to keras_attn.training.callbacks",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = moved
