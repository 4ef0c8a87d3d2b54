"""Float weights of the shipped translator, read back from its SavedModel.

`python tools/translator_weights_from_saved_model.py FOLDER W` rebuilds
`recipes/translation.py`'s model with its default hyperparameters, reads
the variables of `FOLDER/saved_model` (Keras's weight-only int8 for the
Embedding and Dense layers, float for the rest) and writes float weights
`W` (each int8 kernel divided by its scale, as Keras's int8 layers do)
with the vocabularies beside them (`W.vocabularies.json`). Then
`python recipes/translation.py --weights W --out DIR` exports the folder
again (a new `Translator` setting, say) without training: quantized again
by Keras, the weights give back the same int8 values, which the script
checks before writing anything.
"""

import argparse
import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from recipes import translation  # noqa: E402

QUANTIZED = (
    keras.layers.Embedding,
    keras.layers.Dense,
    keras.layers.EinsumDense,
)


def read_variable(reader, stored, variable, index):
    """The stored value of a model variable: by its Keras path (the
    SavedModels of `keras_attn.export`, `served_variables/<path>`), else
    by its index (older ones, `model_variables/<i>`); `None` when the
    SavedModel does not hold it."""
    from keras_attn.export.saved_model import checkpoint_key

    for key in (
        checkpoint_key(variable.path),
        f"model_variables/{index}/.ATTRIBUTES/VARIABLE_VALUE",
    ):
        if key in stored:
            return reader.get_tensor(key)
    return None


def read_vocabulary(folder, name):
    with open(os.path.join(folder, name), encoding="utf-8") as f:
        tokens = f.read().split("\n")
    if tokens[-1] == "":
        tokens = tokens[:-1]
    if tokens[:2] != ["", "[UNK]"]:
        raise ValueError(
            f"{name} in {folder!r} does not start with '' and [UNK]"
        )
    return tokens[2:]  # the recipe's list: padding and [UNK] are implied


def build(vocabularies):
    """The recipe's `(model, encode, step_fn)` for these vocabularies,
    with the same layer names (and so variable paths) each time."""
    keras.backend.clear_session()
    hp = dict(translation.HPARAMS)
    sizes = [len(vocabularies[k]) + 2 for k in ("source", "target")]
    return translation.build_models(*sizes, hp)


def int8_weight_only(trainer):
    config = keras.quantizers.Int8QuantizationConfig(activation_quantizer=None)
    trainer.quantize(config=config, filters=lambda x: isinstance(x, QUANTIZED))


def dequantized(layer):
    """`{variable path: float value}` of a Keras int8 layer."""
    if isinstance(layer, keras.layers.Embedding):
        table = layer._embeddings.numpy().astype("float32")
        return {
            layer.embeddings.path: table
            / layer.embeddings_scale.numpy()[:, None]
        }
    scale = layer.kernel_scale
    if isinstance(layer, keras.layers.EinsumDense):
        scale = layer._adjust_scale_for_dequant(scale)
    kernel = layer._kernel.numpy().astype("float32") / np.asarray(scale)
    return {layer.kernel.path: kernel}


def main(folder, weights):
    for path in (weights, weights + ".vocabularies.json"):
        if os.path.lexists(path):
            raise ValueError(
                f"Expected a new file for weights. Received: {path!r}, which "
                "exists (nothing is overwritten)"
            )
    if not weights.endswith(".weights.h5"):
        raise ValueError(
            f"Expected weights to end with .weights.h5. Received: {weights!r}"
        )
    vocabularies = {
        "source": read_vocabulary(folder, "source_vocabulary.txt"),
        "target": read_vocabulary(folder, "target_vocabulary.txt"),
    }
    shipped = build(vocabularies)[0]
    int8_weight_only(shipped)
    reader = tf.train.load_checkpoint(
        os.path.join(folder, "saved_model", "variables", "variables")
    )
    stored = set(reader.get_variable_to_shape_map())
    for i, variable in enumerate(shipped.variables):
        value = read_variable(reader, stored, variable, i)
        if value is None:  # not read by any signature (dropout's seed)
            continue
        if tuple(value.shape) != tuple(variable.shape):
            raise ValueError(
                f"{folder!r} does not hold the recipe's model: variable {i} "
                f"({variable.path}) is {value.shape}, expected {variable.shape}"
            )
        variable.assign(value)
    floats = {}
    for layer in shipped._flatten_layers():
        if getattr(layer, "quantization_mode", None) == "int8":
            floats.update(dequantized(layer))
    restored = build(vocabularies)[0]
    by_path = {v.path: v for v in shipped.variables}
    for variable in restored.variables:
        value = floats.get(variable.path)
        if value is None:
            value = by_path[variable.path].numpy()
        variable.assign(value)
    # Quantized again, the float weights give back the shipped values.
    again = build(vocabularies)[0]
    again.set_weights(restored.get_weights())
    int8_weight_only(again)
    # The same int8 values; the scales to 1e-5 (Keras adds an epsilon).
    for a, b in zip(again.variables, shipped.variables, strict=True):
        a, b, name = a.numpy(), b.numpy(), a.path
        if "seed_generator" in name:  # dropout's state, not a weight
            continue
        same = (
            np.allclose(a, b, rtol=1e-5, atol=0)
            if a.dtype.kind == "f"
            else np.array_equal(a, b)
        )
        if not same:
            raise ValueError(
                f"{name} does not quantize back to the shipped values "
                f"(largest difference {np.abs(a - b).max()})"
            )
    restored.save_weights(weights)
    with open(weights + ".vocabularies.json", "w", encoding="utf-8") as f:
        json.dump(vocabularies, f, ensure_ascii=False)
    print(f"wrote {weights} ({len(floats)} dequantized tensors)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "folder", help="a translator folder (saved_model/ inside)"
    )
    parser.add_argument("weights", help="the .weights.h5 file to write")
    args = parser.parse_args()
    main(args.folder, args.weights)
