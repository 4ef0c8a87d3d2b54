"""Deprecated path, an alias of the module that moved:
`keras_attn.layers.sinusoidal_position_encoding`.
It goes away in the next release."""

import sys
import warnings

from keras_attn.layers import sinusoidal_position_encoding as moved

warnings.warn(
    "keras_attn.sinusoidal_position_encoding moved to "
    "keras_attn.layers.sinusoidal_position_encoding",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = moved
