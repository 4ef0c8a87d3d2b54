"""Deprecated path, an alias of the module that moved:
`keras_attn.training.distribute`. It goes away in the next release."""

import sys
import warnings

from keras_attn.training import distribute as moved

warnings.warn(
    "keras_attn.distribute moved to keras_attn.training.distribute",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = moved
