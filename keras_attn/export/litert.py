"""LiteRT conversion: float32, float16, dynamic-range and full-integer
int8, metadata inside the flatbuffer, op listing, signature exports."""

import contextlib
import shutil

import numpy as np

from keras_attn.export import logs
from keras_attn.export.destination import (
    check_destination,
    staged,
    temporary_dir,
)
from keras_attn.export.flatbuffer import (
    drop_index_wrapping,
    keep_probability_ranges,
    share_quantization,
)
from keras_attn.export.unroll import has_rnn, litert_ready, with_dynamic_length
from keras_attn.legacy import exports as legacy_exports
from keras_attn_runtime.signature import DEFAULT_SIGNATURE

QUANTIZATIONS = ("none", "float16", "dynamic", "int8")


def convert_tflite(
    model,
    quantize="none",
    representative_data=None,
    batch_size=1,
    unroll=None,
    dynamic_length=False,
    verbose=False,
):
    """Convert a token-id model to LiteRT flatbuffer bytes, builtin ops only.

    Embedding lookups gather the ids as they are, without Keras's
    negative-index wrapping (`flatbuffer.drop_index_wrapping`): token ids are
    never negative, and microcontrollers cannot run the wrapping's
    `SELECT`. In `"int8"`, each softmax keeps its own output grid, [0, 1)
    in steps of 1/256 (`flatbuffer.keep_probability_ranges`), rather than the
    range calibration saw: an input shorter than the calibration's would
    otherwise have its attention weights clipped.

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
            vectorizer did). Outputs along the time axis keep the static
            length, zero-padded past the input's (`length_axes`). Not
            with unrolling, so not for a recurrent model in `"int8"`; an
            attention model in `"int8"` is then calibrated at each row's
            own length.

        verbose: a Keras progress bar over the `"int8"` calibration rows
            (slow for a recurrent model: it is unrolled). Defaults to
            `False`."""
    import tensorflow as tf

    unroll = _check_conversion(
        model, quantize, representative_data, batch_size, unroll, dynamic_length
    )
    serve = _token_function(model, batch_size, unroll, dynamic_length)
    frozen = _freeze(serve)
    module = tf.Module()
    module.serve = frozen
    with scratch_dir() as tmp:
        with logs.quiet():
            tf.saved_model.save(
                module, tmp, signatures={DEFAULT_SIGNATURE: frozen}
            )
        converter = tf.lite.TFLiteConverter.from_saved_model(tmp)
        return _convert(
            converter, quantize, representative_data, dynamic_length, verbose
        )


def _check_conversion(
    model, quantize, representative_data, batch_size, unroll, dynamic_length
):
    """`convert_tflite`'s argument checks; returns `unroll` resolved."""
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
    return unroll


def _token_function(model, batch_size, unroll, dynamic_length):
    """The `tf.function` that `convert_tflite` converts: `tokens` in (cut
    at the model's length), the outputs by name, those along the time
    axis of a variable-length input padded to that length (see
    `length_axes`)."""
    import tensorflow as tf

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
    static = _named_outputs(model)
    pad = {
        name: {axis: static[name].shape[axis] for axis in axes}
        for name, axes in (
            length_axes(model, ready) if dynamic_length else {}
        ).items()
    }

    @tf.function(input_signature=[spec])
    def serve(tokens):
        out = ready(tokens[:, :length], training=False)
        if not isinstance(out, dict):
            out = out if isinstance(out, (list, tuple)) else [out]
            out = {f"output_{i}": o for i, o in enumerate(out)}
        return {
            k: at_static_sizes(v, pad[k]) if k in pad else v
            for k, v in out.items()
        }

    return serve


def _named_outputs(model):
    """`model`'s outputs by the names `convert_tflite`'s signature gives
    them."""
    outputs = model.output
    if isinstance(outputs, dict):
        return dict(outputs)
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    return {f"output_{i}": o for i, o in enumerate(outputs)}


def length_axes(model, dynamic=None):
    """`{output name: [axis, ...]}`: the axes of a token model's outputs
    whose size follows the input's length (an attention map's time axis),
    found as those that lose their static size when the input's does.

    A file written with `dynamic_length=True` pads them to the model's
    static length: LiteRT's `CompiledModel` allocates each output from its
    declared shape before the run, and a size that a `WHILE` loop
    computes would otherwise be declared as 1 and written past its
    buffer. The exported config records them (`keras_attn_runtime` cuts
    them back to each input's length).

    Args:
        model: a Keras model with one integer input of static length.
        dynamic: `model` with a variable time axis, if already built
            (`unroll.with_dynamic_length`).
    """
    dynamic = dynamic if dynamic is not None else with_dynamic_length(model)
    static, free = _named_outputs(model), _named_outputs(dynamic)
    axes = {}
    for name, tensor in static.items():
        found = [
            axis
            for axis, (n, m) in enumerate(
                zip(tensor.shape, free[name].shape, strict=True)
            )
            if axis > 0 and n is not None and m is None
        ]
        if found:
            axes[name] = found
    return axes


def at_static_sizes(tensor, sizes):
    """`tensor` zero-padded at the end of the axes `sizes` names
    (`{axis: size}`) to those sizes, declared with them (a pad by the full
    size, then a slice of constant size: LiteRT keeps static sizes
    through these)."""
    import tensorflow as tf

    pads = [[0, sizes.get(axis, 0)] for axis in range(tensor.shape.rank)]
    cut = [
        sizes[axis] if axis in sizes else tf.shape(tensor)[axis]
        for axis in range(tensor.shape.rank)
    ]
    return tf.slice(tf.pad(tensor, pads), [0] * tensor.shape.rank, cut)


@contextlib.contextmanager
def scratch_dir():
    """A temporary folder under the system temp dir for intermediate
    SavedModels, removed afterwards; one left by a killed export is
    removed by the next export (its name carries the dead process id)."""
    path = temporary_dir(prefix="keras-attn-scratch-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _convert(
    converter, quantize, representative_data, own_lengths=False, verbose=False
):
    """`own_lengths`: calibrate each row at its own length (its ids up to
    the last non-zero one), as a variable-length model will run it.
    `verbose`: a progress bar over the calibration rows."""
    import tensorflow as tf

    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantize != "none":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "float16":
        converter.target_spec.supported_types = [tf.float16]
    if quantize == "int8":
        data = np.asarray(representative_data).astype("int32")

        def representative():
            import keras

            bar = keras.utils.Progbar(len(data), unit_name="row")
            for i, row in enumerate(data):
                if own_lengths:
                    row = row[
                        : max(1, int(np.flatnonzero(row).max(initial=0)) + 1)
                    ]
                yield [row[None]]
                if verbose:
                    bar.update(i + 1)

        converter.representative_dataset = representative
        converter.target_spec.supported_ops = [
            tf.lite.OpsSet.TFLITE_BUILTINS_INT8
        ]
    with logs.quiet():
        data = drop_index_wrapping(converter.convert())
    if quantize == "int8":
        data = keep_probability_ranges(data)
    return data


def with_metadata(data, entries):
    """LiteRT flatbuffer bytes with `entries` (`{name: bytes}`) added as
    model metadata (replacing entries of the same name)."""
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(data))
    model.metadata = [
        m
        for m in (model.metadata or [])
        if (m.name.decode() if isinstance(m.name, bytes) else m.name)
        not in entries
    ]
    for name, value in entries.items():
        buffer = schema.BufferT()
        buffer.data = np.frombuffer(bytes(value), dtype=np.uint8)
        model.buffers.append(buffer)
        entry = schema.MetadataT()
        entry.name = name
        entry.buffer = len(model.buffers) - 1
        model.metadata.append(entry)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


@legacy_exports.options_by_position("overwrite", "protect", "metadata")
def export_tflite(
    model, path, *, overwrite=False, protect=(), metadata=None, **kwargs
):
    """`convert_tflite` and write the result atomically to `path`.

    Args:
        model: as in `convert_tflite`.
        path: the `.tflite` file to write.
        overwrite: replace `path` even when it is not a LiteRT file.
            Defaults to `False`.
        protect: paths never to replace (see `check_destination`).
        metadata: `{name: bytes}` stored in the flatbuffer. Defaults to
            `None`.
    """
    target = check_destination(path, "tflite", overwrite, protect)
    data = convert_tflite(model, **kwargs)
    if metadata:
        data = with_metadata(data, metadata)
    with staged(target) as (tmp,):
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


def _convertible(functions, share_weights):
    """`(module, signatures)` to save for the converter: the functions
    frozen one by one, or (`share_weights`) as they are, with the
    variables they read tracked once by the module."""
    import tensorflow as tf

    module, signatures, variables = tf.Module(), {}, {}
    for name, function in functions.items():
        if share_weights:
            for v in function.get_concrete_function().variables:
                variables[id(v)] = v
            signatures[name] = function
        else:
            signatures[name] = _freeze(function)
        setattr(module, name, signatures[name])
    module.shared_weights = list(variables.values())
    return module, signatures


def check_signature_quantize(quantize):
    """The quantizations `export_signatures_tflite` offers."""
    if quantize not in ("none", "float16", "dynamic"):
        raise ValueError(
            'Expected quantize to be "none", "float16" or "dynamic". '
            f"Received: quantize={quantize!r}"
        )


@legacy_exports.options_by_position("overwrite", "metadata", "quantize")
def export_signatures_tflite(
    functions,
    path,
    *,
    overwrite=False,
    protect=(),
    metadata=None,
    quantize="none",
    share_weights=False,
):
    """A LiteRT model with one signature per `tf.function`, builtin ops only.

    Args:
        functions: `{signature name: tf.function}`, each with an
            `input_signature` and returning a dict of named tensors (e.g.
            a decoder's `encode` and one-token `step`).
        path: the `.tflite` file to write.
        overwrite: replace `path` even when it is not a LiteRT file.
            Defaults to `False`.
        protect: paths never to replace (see `check_destination`).
        metadata: `{name: bytes}` stored in the file as LiteRT metadata
            (see `with_metadata`). Defaults to `None`.
        quantize: `"none"`, `"float16"` (float16 weights) or `"dynamic"`
            (int8 weights, float activations). Full-integer `"int8"` needs
            calibration data and is not offered here. Defaults to
            `"none"`.
        share_weights: `True`: the signatures read one copy of the
            variables they share (the converter freezes them once) and
            of their int8 scales (`flatbuffer.share_quantization`), for
            a file of several signatures over one model. `False` (the
            default): each function is frozen on its own.

    Variables become constants (no `READ_VARIABLE` ops); the file is
    written atomically.
    """
    import tensorflow as tf

    check_signature_quantize(quantize)
    target = check_destination(path, "tflite", overwrite, protect)
    frozen, signatures = _convertible(functions, share_weights)
    with scratch_dir() as tmp:
        # Gradients are not needed to convert; tracing them fails on the
        # frozen constants of Keras's int8 layers (custom gradients).
        no_gradients = tf.saved_model.SaveOptions(
            experimental_custom_gradients=False
        )
        with logs.quiet():
            tf.saved_model.save(frozen, tmp, signatures, options=no_gradients)
        converter = tf.lite.TFLiteConverter.from_saved_model(
            tmp, signature_keys=list(signatures)
        )
        data = _convert(converter, quantize, None)
    if metadata:
        data = with_metadata(data, metadata)
    if share_weights:  # last: a rewrite would store the tables apart again
        data = share_quantization(data)
    with staged(target) as (tmp_path,):
        with open(tmp_path, "wb") as f:
            f.write(data)
    return path
