"""Derive the SavedModel op allowlist (`keras_attn/loading/allowed_ops.txt`).

`python tools/derive_allowed_ops.py` exports every model of the export
matrix (`tests/export/test_export_matrix.py`) as a SavedModel with
Keras's `model.export(format="tf_saved_model")`, reads the op types of those and
of the shipped SavedModels (`saved_models/*/saved_model`), and prints the
union, one op per line, without the checkpoint ops that `trust.py` admits
only in the saver's own functions. A person reviews the difference
against the committed file before replacing it: an op joins the list
only when our layers or Keras's standard layers export it.
"""

import glob
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from keras_attn.loading import trust  # noqa: E402
from tests.layer_models import BUILDERS  # noqa: E402


def keras_standard_model():
    """Keras's standard sequence layers, as a user's text model uses them."""
    import keras

    layers = keras.layers
    tokens = keras.Input((12,), dtype="int32")
    x = layers.Embedding(60, 16, mask_zero=True)(tokens)
    x = layers.Bidirectional(layers.LSTM(8, return_sequences=True))(x)
    x = layers.GRU(16, return_sequences=True)(x)
    x = layers.LayerNormalization()(x)
    x = layers.Conv1D(16, 3, padding="same", activation="gelu")(x)
    x = layers.BatchNormalization()(x)
    x = layers.MaxPooling1D(2)(x)
    x = layers.Dense(16, activation="swish")(x)
    x = layers.GlobalMaxPooling1D()(x)
    x = layers.Dropout(0.1)(x)
    out = layers.Dense(2, activation="softmax")(x)
    return keras.Model(tokens, out)


def op_types(path):
    graph = trust.read_saved_model(path).meta_graphs[0].graph_def
    ops = {n.op for n in graph.node}
    for function in graph.library.function:
        ops.update(n.op for n in function.node_def)
    return ops


def main():
    ops = set()
    for path in sorted(glob.glob("saved_models/*/saved_model")):
        ops |= op_types(path)
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in {**BUILDERS, "keras": keras_standard_model}.items():
            path = os.path.join(tmp, name)
            build().export(path, format="tf_saved_model", verbose=False)
            ops |= op_types(path)
    for op in sorted(ops - trust.CHECKPOINT_OPS):
        print(op)


if __name__ == "__main__":
    main()
