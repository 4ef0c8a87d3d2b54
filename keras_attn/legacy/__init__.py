"""What keras_attn still reads or accepts from its earlier versions, in
one place, each item with the version that removes it.

`REMOVALS` lists them; `tests/test_legacy.py` fails once the package's
version reaches an item's removal, so that it goes then. The runtime's
own items are in `keras_attn_runtime.legacy`.
"""

# (what is still accepted, the module here that holds it, removed in)
REMOVALS = [
    (
        "0.1 .keras files whose attention layers held their projection "
        "weights themselves, and 0.1 weight names (`query_kernel`, ...)",
        "keras_attn.legacy.layers",
        "1.0",
    ),
    (
        "0.2 public names of Keras's private settings on "
        "`MultiHeadPositional` (`flash_attention`, `sliding_window`, "
        "`use_gate`)",
        "keras_attn.legacy.layers",
        "1.0",
    ),
    (
        "`keras_attn.seq2seq.Translator` and the other names that moved "
        "to `keras_attn.translation` (a DeprecationWarning)",
        "keras_attn.legacy.seq2seq",
        "1.0",
    ),
    (
        "exporters' options given by position, "
        "`export_streaming_tflite(path, start, step_fn, ...)`, and "
        "`keras_attn.export.export_streaming_translator`",
        "keras_attn.legacy.exports",
        "1.0",
    ),
    (
        "text-classifier SavedModels written before 0.3, without a "
        "known-words output",
        "keras_attn.legacy.saved_models",
        "1.0",
    ),
    (
        "`keras_attn.opener`, `keras_attn.trust` and "
        "`keras_attn.allowed_ops`, now in `keras_attn.loading` (a "
        "DeprecationWarning)",
        "keras_attn.legacy.modules",
        "1.0",
    ),
]
