"""Deprecated path, an alias of the module that moved:
`keras_attn.layers.structured_self_attention`.
It goes away in the next release."""

import sys
import warnings

from keras_attn.layers import structured_self_attention as moved

warnings.warn(
    "keras_attn.structured_self_attention moved to "
    "keras_attn.layers.structured_self_attention",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = moved
