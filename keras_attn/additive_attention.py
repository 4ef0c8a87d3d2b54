"""Deprecated path, an alias of the module that moved:
`keras_attn.layers.additive_attention`. It goes away in the next release."""

import sys
import warnings

from keras_attn.layers import additive_attention as moved

warnings.warn(
    "keras_attn.additive_attention moved to "
    "keras_attn.layers.additive_attention",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = moved
