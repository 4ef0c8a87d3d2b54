"""Deprecated: the commands moved to `keras_attn_cli.commands` (the CLI is
its own package, which nothing in `keras_attn` imports). This alias goes
away in the next release."""

import sys
import warnings

from keras_attn_cli import commands

warnings.warn(
    "keras_attn.cli moved to keras_attn_cli.commands",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = commands
