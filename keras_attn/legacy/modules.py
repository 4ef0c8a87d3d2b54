"""Modules that moved: the old import path is the new module itself,
with a `DeprecationWarning` naming where it lives now."""

import importlib
import sys
import warnings

# old path: new path
MOVED = {
    "keras_attn.opener": "keras_attn.loading.opener",
    "keras_attn.trust": "keras_attn.loading.trust",
    "keras_attn.allowed_ops": "keras_attn.loading.allowed_ops",
}


def alias(old):
    """Make the module being imported as `old` its new module (one
    object: attributes set on either are set on both)."""
    new = MOVED[old]
    warnings.warn(
        f"{old} moved to {new}; the old name goes in keras_attn 1.0",
        DeprecationWarning,
        stacklevel=3,
    )
    sys.modules[old] = importlib.import_module(new)
