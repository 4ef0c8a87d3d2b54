"""Deprecated path, an alias of the module that moved:
`keras_attn.layers.learned_position_embedding`.
It goes away in the next release."""

import sys
import warnings

from keras_attn.layers import learned_position_embedding as moved

warnings.warn(
    "keras_attn.learned_position_embedding moved to "
    "keras_attn.layers.learned_position_embedding",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = moved
