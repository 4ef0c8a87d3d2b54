"""Export trained models for serving: SavedModel and LiteRT/TFLite.

Every writer builds the artifact under a temporary path next to the
target and moves it into place only when it is complete, so a failure never
leaves a half-written artifact behind.
"""

import contextlib
import os
import shutil
import tempfile

import numpy as np


@contextlib.contextmanager
def atomic_path(target):
    """Yield a temporary path; on success move it to `target`.

    Works for files and directories. An existing `target` is replaced only
    after the new artifact is complete.
    """
    target = os.path.abspath(target)
    parent = os.path.dirname(target) or "."
    if not os.path.isdir(parent):
        raise ValueError(
            "The folder for the export does not exist. "
            f"Received: path={target!r}"
        )
    tmp_dir = tempfile.mkdtemp(prefix=".tmp-export-", dir=parent)
    tmp = os.path.join(tmp_dir, os.path.basename(target))
    try:
        yield tmp
        if not os.path.exists(tmp):
            raise RuntimeError(f"The export wrote nothing at {tmp!r}.")
        old = None
        if os.path.exists(target):
            old = os.path.join(tmp_dir, ".old")
            os.replace(target, old)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


def export_saved_model(model, path, input_signature=None):
    """Write a TF-Serving SavedModel with a `serving_default` signature.

    Args:
        model: a built Keras model. Its outputs may be a tensor or a dict of
            named tensors; the signature returns the same names.
        path: target directory.
        input_signature: list of `tf.TensorSpec`. Defaults to one spec per
            model input, built from the model's input shapes and dtypes (a
            string model therefore takes a batch of raw strings).
    """
    import tensorflow as tf

    if input_signature is None:
        input_signature = [
            tf.TensorSpec(t.shape, t.dtype, name=t.name.split(":")[0])
            for t in model.inputs
        ]

    class Served(tf.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        @tf.function(input_signature=input_signature)
        def serve(self, *args):
            outputs = self.model(
                list(args) if len(args) > 1 else args[0], training=False
            )
            if not isinstance(outputs, dict):
                outputs = {"output_0": outputs}
            return outputs

    # A plain tf.Module stores each variable once (keras.export's archive
    # wrote the weights twice in Keras 3.15).
    served = Served()
    with atomic_path(path) as tmp:
        tf.saved_model.save(
            served, tmp, signatures={"serving_default": served.serve}
        )
    return path


QUANTIZATIONS = ("none", "float16", "dynamic", "int8")
_RNN_CLASSES = ("LSTM", "GRU", "SimpleRNN")


def reverse_valid(x, mask):
    """Reverse each sequence's valid prefix in time; padding stays put.

    `x` is `(B, T, ...)`, `mask` a boolean `(B, T)` prefix mask. Step `t`
    of example `b` takes step `len_b - 1 - t` when `t < len_b`.
    """
    from keras import ops

    steps = ops.shape(x)[1]
    lengths = ops.sum(ops.cast(mask, "int32"), axis=1)[:, None]  # (B, 1)
    t = ops.arange(steps, dtype="int32")[None, :]  # (1, T)
    index = ops.where(t < lengths, lengths - 1 - t, t)  # (B, T)
    index = ops.reshape(index, (*ops.shape(index), *([1] * (x.ndim - 2))))
    return ops.take_along_axis(x, ops.broadcast_to(index, ops.shape(x)), 1)


def _unrolled_bidirectional(layer):
    """An unrolled stand-in for a masked `Bidirectional(LSTM/GRU)`.

    Keras 3.15's unrolled `go_backwards` RNN inside `Bidirectional`
    misaligns the backward outputs of padded sequences, so the backward
    direction here runs forwards over the reversed valid prefix.
    """
    import keras
    from keras import ops

    def rnn(sub):
        config = keras.saving.serialize_keras_object(sub)
        config["config"].update(unroll=True, go_backwards=False)
        return keras.saving.deserialize_keras_object(config)

    class UnrolledBidirectional(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.forward_rnn = rnn(layer.forward_layer)
            self.backward_rnn = rnn(layer.backward_layer)
            self.supports_masking = True

        def build(self, input_shape):
            self.forward_rnn.build(input_shape)
            self.backward_rnn.build(input_shape)
            self.built = True

        def call(self, inputs, mask=None):
            if mask is None:
                mask = ops.ones(ops.shape(inputs)[:2], dtype="bool")
            fw = self.forward_rnn(inputs, mask=mask)
            bw = self.backward_rnn(reverse_valid(inputs, mask), mask=mask)
            bw = reverse_valid(bw, mask)
            return ops.concatenate([fw, bw], axis=-1)

        def compute_mask(self, inputs, mask=None):
            return mask

    return UnrolledBidirectional(name=layer.name)


def litert_ready(model):
    """A copy of `model` whose recurrent layers are unrolled.

    Keras 3 lowers a rolled `LSTM`/`GRU` to TensorList ops, which LiteRT
    only runs through Flex (Select TF ops). Unrolled over a fixed length
    they become plain builtin ops. Weights are copied; the inputs must have
    a static time length.
    """
    import keras

    def unroll(config):
        if config.get("class_name") in _RNN_CLASSES:
            config["config"]["unroll"] = True
        for key in ("layer", "backward_layer"):
            inner = config.get("config", {}).get(key)
            if isinstance(inner, dict):
                unroll(inner)
        return config

    def clone(layer):
        if isinstance(layer, keras.Model):
            return keras.models.clone_model(layer, clone_function=clone)
        if (
            isinstance(layer, keras.layers.Bidirectional)
            and layer.merge_mode == "concat"
            and layer.return_sequences
            and not layer.return_state
        ):
            return _unrolled_bidirectional(layer)
        config = unroll(keras.saving.serialize_keras_object(layer))
        return keras.saving.deserialize_keras_object(config)

    copy = keras.models.clone_model(model, clone_function=clone)
    copy.set_weights(model.get_weights())
    return copy


def with_dynamic_length(model):
    """A copy of a one-input token model whose time axis is `None`."""
    import keras

    (spec,) = model.inputs
    tokens = keras.Input((None,), dtype=spec.dtype, name="tokens")
    copy = keras.models.clone_model(model, input_tensors=tokens)
    copy.set_weights(model.get_weights())
    return copy


def has_rnn(model):
    """Whether `model` (or a sub-model) holds a recurrent layer."""
    import keras

    for layer in model.layers:
        if isinstance(layer, keras.Model) and has_rnn(layer):
            return True
        if isinstance(layer, (keras.layers.RNN, keras.layers.Bidirectional)):
            return True
    return False


def convert_tflite(
    model,
    quantize="none",
    representative_data=None,
    batch_size=1,
    unroll=None,
    dynamic_length=False,
):
    """Convert a token-id model to LiteRT flatbuffer bytes, builtin ops only.

    Args:
        model: a Keras model with one integer input of static length.
        quantize: `"none"` (float32), `"float16"` (float16 weights),
            `"dynamic"` (int8 weights, float activations) or `"int8"`
            (full integer: int8 weights and activations, calibrated on
            `representative_data`).
        representative_data: array of inputs for `"int8"` calibration.
        batch_size: the static batch size of the converted model.
        unroll: unroll recurrent layers. Defaults to `None`: only for
            `"int8"`. A rolled RNN at a static length converts to the
            builtin `WHILE` op (weights stored once); the full-integer
            calibrator does not run `WHILE` bodies (it crashed in TF 2.21),
            so `"int8"` unrolls, which stores one quantized copy of the
            RNN weights per step.
        dynamic_length: give the LiteRT model a variable time axis,
            `tokens` of shape `(batch_size, -1)`: feed each review's own
            tokens and a recurrent model runs only that many steps (the
            model cuts inputs longer than its static length, as the
            vectorizer did). Not with unrolling (nor `"int8"`).
    """
    import tensorflow as tf

    if quantize not in QUANTIZATIONS:
        raise ValueError(
            f"Expected quantize to be one of {QUANTIZATIONS}. "
            f"Received: quantize={quantize!r}"
        )
    if quantize == "int8" and representative_data is None:
        raise ValueError(
            'quantize="int8" needs representative_data. '
            "Received: representative_data=None"
        )
    if len(model.inputs) != 1 or model.inputs[0].shape[1] is None:
        raise ValueError(
            "Expected a model with one input of static length. Received: "
            f"inputs={[tuple(t.shape) for t in model.inputs]}"
        )
    if unroll is None:
        unroll = quantize == "int8" and has_rnn(model)
    if dynamic_length and batch_size != 1:
        raise ValueError(
            "dynamic_length=True exports batch 1 (one review at its own "
            f"length). Received: batch_size={batch_size}"
        )
    if dynamic_length and unroll:
        raise ValueError(
            "dynamic_length=True needs a rolled model: unrolling (done for "
            'quantize="int8") fixes the length. Received: '
            f"quantize={quantize!r}, unroll={unroll!r}"
        )
    if dynamic_length:
        ready = with_dynamic_length(model)
    else:
        ready = litert_ready(model) if unroll else model
    length = model.inputs[0].shape[1]
    spec = tf.TensorSpec(
        (batch_size, None if dynamic_length else length),
        tf.int32,
        name="tokens",
    )

    @tf.function(input_signature=[spec])
    def serve(tokens):
        out = ready(tokens[:, :length], training=False)
        return out if isinstance(out, dict) else {"output_0": out}

    frozen = _freeze(serve)
    module = tf.Module()
    module.serve = frozen
    with tempfile.TemporaryDirectory() as tmp:
        tf.saved_model.save(module, tmp, signatures={"serving_default": frozen})
        converter = tf.lite.TFLiteConverter.from_saved_model(tmp)
        return _convert(converter, quantize, representative_data)


def _convert(converter, quantize, representative_data):
    import tensorflow as tf

    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantize != "none":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "float16":
        converter.target_spec.supported_types = [tf.float16]
    if quantize == "int8":
        data = np.asarray(representative_data).astype("int32")

        def representative():
            for row in data:
                yield [row[None]]

        converter.representative_dataset = representative
        converter.target_spec.supported_ops = [
            tf.lite.OpsSet.TFLITE_BUILTINS_INT8
        ]
    return converter.convert()


def export_tflite(model, path, **kwargs):
    """`convert_tflite` and write the result atomically to `path`."""
    data = convert_tflite(model, **kwargs)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
    return path


def tflite_op_names(path_or_bytes):
    """The op names of a LiteRT model (to check for Flex/custom ops)."""
    from ai_edge_litert.interpreter import Interpreter

    if isinstance(path_or_bytes, bytes):
        interpreter = Interpreter(model_content=path_or_bytes)
    else:
        interpreter = Interpreter(model_path=path_or_bytes)
    return sorted({op["op_name"] for op in interpreter._get_ops_details()})


def split_text_model(text_model):
    """`(vectorizer, token_model)` of a raw-text model built as
    `Input(string) → TextVectorization → token model` (the examples')."""
    import keras

    vectorizers = [
        layer
        for layer in text_model.layers
        if isinstance(layer, keras.layers.TextVectorization)
    ]
    inner = [
        layer for layer in text_model.layers if isinstance(layer, keras.Model)
    ]
    if len(vectorizers) != 1 or len(inner) != 1:
        raise ValueError(
            "Expected a model of one TextVectorization layer followed by one "
            f"token model. Received: model={text_model.name!r} with "
            f"{len(vectorizers)} vectorizers and {len(inner)} sub-models"
        )
    return vectorizers[0], inner[0]


def write_vocabulary(vectorizer, path):
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for token in vectorizer.get_vocabulary():
                f.write(token + "\n")
    return path


def export_text_tflite(
    text_model,
    path,
    quantize="none",
    calibration_texts=None,
    batch_size=1,
    dynamic_length=False,
):
    """LiteRT model for a raw-text model, plus `vocabulary.txt` beside it.

    The `TextVectorization` step stays outside (strings are not builtin
    LiteRT tensors); `keras_attn.litert_runtime` tokenizes the same way.
    `dynamic_length`: see `convert_tflite`.
    """
    vectorizer, token_model = split_text_model(text_model)
    representative = None
    if quantize == "int8":
        if calibration_texts is None or len(calibration_texts) == 0:
            raise ValueError(
                'quantize="int8" needs calibration texts. Received: '
                f"calibration_texts={calibration_texts!r}"
            )
        representative = np.asarray(
            vectorizer(np.asarray(calibration_texts, dtype=object))
        )
    export_tflite(
        token_model,
        path,
        quantize=quantize,
        representative_data=representative,
        batch_size=batch_size,
        dynamic_length=dynamic_length,
    )
    vocab = os.path.join(
        os.path.dirname(os.path.abspath(path)), "vocabulary.txt"
    )
    write_vocabulary(vectorizer, vocab)
    return path


def _freeze(function):
    """A `tf.function` like `function` with every variable a constant.

    LiteRT then needs no resource variables (`READ_VARIABLE` ops).
    """
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    concrete = function.get_concrete_function()
    names = sorted(concrete.structured_outputs)
    const = convert_variables_to_constants_v2(concrete)
    spec = function.input_signature

    @tf.function(input_signature=spec)
    def frozen(*args):  # the frozen function returns a flat list
        return dict(zip(names, const(*args), strict=True))

    return frozen


def export_seq2seq_tflite(encoder, step, path, source_length, units):
    """LiteRT model with two signatures: `encode` and one decoder `step`.

    `encode(source (1, S) int32) -> memory (1, S, U), state (1, U)`;
    `step(prev (1, 1) int32, state (1, U), memory (1, S, U), memory_mask
    (1, S) bool) -> logits (1, V), new_state (1, U), attention (1, S)`.
    Builtin ops only; a Python loop drives greedy decoding
    (`keras_attn.litert_runtime.LiteRTTranslator`).
    """
    import tensorflow as tf

    class Seq2Seq(tf.Module):
        @tf.function(
            input_signature=[
                tf.TensorSpec([1, source_length], tf.int32, name="source")
            ]
        )
        def encode(self, source):
            memory, state = encoder(source, training=False)
            return {"memory": memory, "state": state}

        @tf.function(
            input_signature=[
                tf.TensorSpec([1, 1], tf.int32, name="prev"),
                tf.TensorSpec([1, units], tf.float32, name="state"),
                tf.TensorSpec(
                    [1, source_length, units], tf.float32, name="memory"
                ),
                tf.TensorSpec([1, source_length], tf.bool, name="memory_mask"),
            ]
        )
        def step(self, prev, state, memory, memory_mask):
            logits, new_state, att = step(
                [prev, state, memory, memory_mask], training=False
            )
            return {"logits": logits, "state": new_state, "attention": att}

    module = Seq2Seq()
    frozen = tf.Module()
    frozen.encode = _freeze(module.encode)
    frozen.step = _freeze(module.step)
    with tempfile.TemporaryDirectory() as tmp:
        tf.saved_model.save(
            frozen,
            tmp,
            signatures={"encode": frozen.encode, "step": frozen.step},
        )
        converter = tf.lite.TFLiteConverter.from_saved_model(
            tmp, signature_keys=["encode", "step"]
        )
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        data = converter.convert()
    with atomic_path(path) as tmp_path:
        with open(tmp_path, "wb") as f:
            f.write(data)
    return path
