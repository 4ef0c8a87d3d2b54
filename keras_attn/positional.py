"""Deprecated path, an alias of the module that moved:
`keras_attn.ops.positional`. It goes away in the next release."""

import sys
import warnings

from keras_attn.ops import positional as moved

warnings.warn(
    "keras_attn.positional moved to keras_attn.ops.positional",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = moved
