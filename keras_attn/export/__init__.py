"""Export trained models for serving: SavedModel, LiteRT and ONNX.

The package's parts, one a format: `destination` (where an export lands:
checks, staging, atomic replacement), `saved_model`, `litert`
(conversion and quantization), `flatbuffer` (rewrites of LiteRT files),
`onnx`, `litertlm` (a decoder-only model as a LiteRT-LM bundle),
`streaming` (a decoder's start and step signatures, its state as
explicit inputs and outputs); `unroll`
(RNN layers made LiteRT-ready) and `text_models` (raw-text models end to
end, in every format). Everything public is importable from here.

Every exporter is called one way: `export_<format>(obj, path, *,
overwrite=False, protect=(), ...)`, with what it exports first, where it
goes second, and its options by keyword (`keras_attn.legacy.exports`
still takes the earlier forms, with a warning). A translator's files are
`keras_attn.translation.files`'.
"""

import os

from keras_attn.export.destination import (
    KINDS,
    STALE_SECONDS,
    atomic_path,
    check_destination,
    check_vocabulary_file,
    clean_stale_temporaries,
    is_onnx_file,
    is_saved_model_dir,
    is_tflite_file,
    staged,
    write_vocabulary,
)
from keras_attn.export.litert import (
    QUANTIZATIONS,
    at_static_sizes,
    check_signature_quantize,
    convert_tflite,
    export_signatures_tflite,
    export_tflite,
    length_axes,
    tflite_op_names,
    with_metadata,
)
from keras_attn.export.litertlm import export_litertlm
from keras_attn.export.saved_model import (
    KNOWN_WORDS,
    export_module,
    export_saved_model,
)
from keras_attn.export.streaming import (
    cached_decoder,
    export_streaming_tflite,
)
from keras_attn.export.text_models import (
    check_text_export,
    export_onnx,
    export_text_model,
    export_text_tflite,
    split_text_model,
)
from keras_attn.export.unroll import (
    has_rnn,
    litert_ready,
    reverse_valid,
    with_dynamic_length,
)

__all__ = [
    "at_static_sizes",
    "KINDS",
    "KNOWN_WORDS",
    "QUANTIZATIONS",
    "STALE_SECONDS",
    "atomic_path",
    "check_destination",
    "check_signature_quantize",
    "check_text_export",
    "check_vocabulary_file",
    "clean_stale_temporaries",
    "convert_tflite",
    "export_litertlm",
    "export_module",
    "export_onnx",
    "export_saved_model",
    "export_signatures_tflite",
    "cached_decoder",
    "export_streaming_tflite",
    "export_text_model",
    "export_text_tflite",
    "export_tflite",
    "length_axes",
    "has_rnn",
    "is_onnx_file",
    "is_saved_model_dir",
    "is_tflite_file",
    "litert_ready",
    "reverse_valid",
    "split_text_model",
    "staged",
    "tflite_op_names",
    "versions",
    "with_dynamic_length",
    "with_metadata",
    "write_vocabulary",
]


def versions():
    """What made an artifact, for its `metrics.json`.

    Returns:
        A dict: the versions of `keras_attn`, Keras and TensorFlow (where
        installed), the Python version and the machine.
    """
    import importlib
    import platform

    record = {}
    for name in ("keras_attn", "keras", "tensorflow"):
        try:
            record[name] = importlib.import_module(name).__version__
        except ImportError:
            continue
    record["python"] = platform.python_version()
    record["machine"] = f"{platform.machine()}, {os.cpu_count()} CPU cores"
    return record


def __getattr__(name):
    from keras_attn.legacy import exports as legacy_exports

    return legacy_exports.moved(__name__, name)
