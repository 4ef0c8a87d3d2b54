"""keras_attn's edge runtime: run exported models with NumPy and LiteRT
(`ai-edge-litert`; `onnxruntime` for `.onnx`) only, no Keras and no
TensorFlow: for phones, single-board computers and NPU hosts.

    from keras_attn_runtime import LiteRTClassifier
    clf = LiteRTClassifier("model.tflite")  # vocabulary from the file
    clf.predict(["A wonderful film."])["probability"]

    import keras_attn_runtime
    model = keras_attn_runtime.open("saved_models/imdb_edge")  # .tflite, .onnx
    model.run("serving_default", {"text": [b"A wonderful film."]})

Its own distribution, `keras-attn-runtime` (`pip install ./runtime` from
a checkout), which `keras_attn` depends on (docs/install.md).
"""

from keras_attn_runtime.artifact import (
    FORMAT_VERSION,
    MAX_METADATA_LENGTH,
    METADATA_CONFIG,
    METADATA_SOURCE_VOCABULARY,
    METADATA_TARGET_VOCABULARY,
    METADATA_VOCABULARY,
    TEXT_CLASSIFIER,
    TRANSLATOR,
    artifact_config,
    check_external_data,
    check_format,
    load_verified,
    metadata,
    metadata_length,
    verify_model,
)
from keras_attn_runtime.classifier import LiteRTClassifier, OnnxClassifier

# `keras_attn_runtime.open(path)`: every model file, one way (not in
# `__all__`: a star import would hide the builtin `open`).
from keras_attn_runtime.opener import open  # noqa: A004, E402, F401
from keras_attn_runtime.signature import DEFAULT_SIGNATURE, Signature
from keras_attn_runtime.streaming import StreamingDecoder
from keras_attn_runtime.text import (
    ASCII_LOWER,
    DETOKENIZERS,
    MAX_TOKEN_LENGTH,
    SEGMENTERS,
    STANDARDIZERS,
    Tokenizer,
    as_texts,
    check_vocabulary,
    detokenizer,
    parse_vocabulary,
    read_vocabulary,
    segmenter,
    segments,
    split_sentence,
    standardize,
    standardize_sentence,
    tokens,
)
from keras_attn_runtime.translator import LiteRTTranslator

__version__ = "0.3.0.dev0"

__all__ = [
    "ASCII_LOWER",
    "DEFAULT_SIGNATURE",
    "Signature",
    "FORMAT_VERSION",
    "METADATA_SOURCE_VOCABULARY",
    "METADATA_TARGET_VOCABULARY",
    "TEXT_CLASSIFIER",
    "TRANSLATOR",
    "artifact_config",
    "check_format",
    "DETOKENIZERS",
    "LiteRTClassifier",
    "LiteRTTranslator",
    "MAX_METADATA_LENGTH",
    "MAX_TOKEN_LENGTH",
    "METADATA_CONFIG",
    "METADATA_VOCABULARY",
    "OnnxClassifier",
    "SEGMENTERS",
    "STANDARDIZERS",
    "StreamingDecoder",
    "Tokenizer",
    "as_texts",
    "check_external_data",
    "check_vocabulary",
    "detokenizer",
    "load_verified",
    "metadata",
    "metadata_length",
    "parse_vocabulary",
    "read_vocabulary",
    "segmenter",
    "segments",
    "split_sentence",
    "standardize",
    "standardize_sentence",
    "tokens",
    "verify_model",
]
