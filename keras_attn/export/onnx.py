"""ONNX export: a token model through Keras's `export(format="onnx")`,
with the vocabulary and the artifact config in the model's metadata
(`keras_attn_runtime.OnnxClassifier` reads them)."""

import json
import os

from keras_attn.export.litert import scratch_dir
from keras_attn_runtime import artifact


def text_classifier_bytes(vectorizer, token_model):
    """The ONNX bytes of a text classifier's `token_model` (int32 token
    ids in), its `vectorizer`'s vocabulary and its length inside."""
    import onnx

    with scratch_dir() as tmp:
        path = os.path.join(tmp, "model.onnx")
        token_model.export(path, format="onnx", verbose=False)
        proto = onnx.load(path)
    config = artifact.artifact_config(
        artifact.TEXT_CLASSIFIER,
        max_length=int(token_model.inputs[0].shape[1]),
    )
    entries = {
        artifact.METADATA_VOCABULARY: "\n".join(vectorizer.get_vocabulary()),
        artifact.METADATA_CONFIG: json.dumps(config),
    }
    for key, value in entries.items():
        prop = proto.metadata_props.add()
        prop.key, prop.value = key, value
    return proto.SerializeToString()
