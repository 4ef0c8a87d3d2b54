"""keras_attn's trained models as a pip-installable distribution, as spaCy
ships its pipelines: `pip install ./models` (the `keras-attn-models`
distribution, built from the repository's `saved_models/`). `keras-attn`
finds them through `folder()` when no `--models` or `$KERAS_ATTN_MODELS`
is given and no source checkout is at hand."""

import importlib.resources


def folder():
    """The installed `saved_models` folder (a real path on disk)."""
    return str(importlib.resources.files(__name__) / "saved_models")
