"""The names that moved from `keras_attn.seq2seq` to the TensorFlow
application `keras_attn.translation`, still reached from their old place
with a `DeprecationWarning` and imported on first use (removed in 1.0,
`keras_attn.legacy.REMOVALS`)."""

import importlib
import warnings

NEW = "keras_attn.translation"
MOVED = {
    "Translator",
    "translation_scores",
    "teacher_forcing_dataset",
    "read_pairs",
    "split_by_source",
    "references",
    "word_vocabulary",
    "serving",
    "data",
    "evaluation",
    "segmenting",
    "subwords",
}


def moved(module, name):
    """`module.name` (`module`: `"keras_attn.seq2seq"`) for a name that
    moved, with a `DeprecationWarning`; an `AttributeError` for others."""
    if name not in MOVED:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warnings.warn(
        f"{module}.{name} moved to {NEW}: import it from there.",
        DeprecationWarning,
        stacklevel=3,
    )
    if name == "serving":
        return importlib.import_module(f"{NEW}.translator")
    if name in ("data", "evaluation", "segmenting", "subwords"):
        return importlib.import_module(f"{NEW}.{name}")
    return getattr(importlib.import_module(NEW), name)
