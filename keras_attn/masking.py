"""Deprecated path, an alias of the module that moved:
`keras_attn.ops.masking`. It goes away in the next release."""

import sys
import warnings

from keras_attn.ops import masking as moved

warnings.warn(
    "keras_attn.masking moved to keras_attn.ops.masking",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = moved
