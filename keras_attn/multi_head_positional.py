"""Deprecated path, an alias of the module that moved:
`keras_attn.layers.multi_head_positional`. It goes away in the next release."""

import sys
import warnings

from keras_attn.layers import multi_head_positional as moved

warnings.warn(
    "keras_attn.multi_head_positional moved to "
    "keras_attn.layers.multi_head_positional",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = moved
