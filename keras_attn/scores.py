"""Deprecated path, an alias of the module that moved:
`keras_attn.ops.scores`. It goes away in the next release."""

import sys
import warnings

from keras_attn.ops import scores as moved

warnings.warn(
    "keras_attn.scores moved to keras_attn.ops.scores",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = moved
