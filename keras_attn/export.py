"""Export trained models for serving: SavedModel and LiteRT/TFLite.

Every writer builds the artifact under a temporary path next to the
target and moves it into place only when it is complete, so a failure never
leaves a half-written artifact behind. A destination that exists is
replaced only when it is recognisably an earlier artifact of the same kind
(a SavedModel folder, a LiteRT flatbuffer) or with `overwrite=True`; the
working directory, its ancestors and the paths in `protect` (e.g. the
input model) and the folders that hold them are never replaced.
"""

import contextlib
import json
import os
import shutil
import tempfile

import numpy as np

from keras_attn_runtime import artifact

_TMP_PREFIX = ".tmp-export-"
_SAVED_MODEL_ENTRIES = {
    "saved_model.pb",
    "saved_model.pbtxt",
    "fingerprint.pb",
    "keras_metadata.pb",
    "variables",
    "assets",
}
KINDS = ("saved_model", "tflite", "onnx")


def is_saved_model_dir(path):
    """A folder holding a SavedModel and nothing else."""
    if not os.path.isdir(path) or os.path.islink(path):
        return False
    entries = set(os.listdir(path))
    return "saved_model.pb" in entries and entries <= _SAVED_MODEL_ENTRIES


def is_tflite_file(path):
    """A regular file with the LiteRT flatbuffer identifier `TFL3`."""
    if not os.path.isfile(path) or os.path.islink(path):
        return False
    with open(path, "rb") as f:
        head = f.read(8)
    return len(head) == 8 and head[4:8] == b"TFL3"


def is_onnx_file(path):
    """A regular file that parses as an ONNX model with a graph."""
    if not os.path.isfile(path) or os.path.islink(path):
        return False
    with open(path, "rb") as f:
        if f.read(1) != b"\x08":  # ModelProto field 1, ir_version
            return False
    try:
        import onnx

        return len(onnx.load(path, load_external_data=False).graph.node) > 0
    except Exception:  # not ONNX, or onnx not installed: not provably ours
        return False


def _is_within(inner, outer):
    """Whether `inner` is `outer` or lies below it (real paths)."""
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def check_destination(path, kind, overwrite=False, protect=(), arg="path"):
    """Raise a `ValueError` unless `path` may receive an export of `kind`.

    Args:
        path: the destination.
        kind: `"saved_model"` (a folder), `"tflite"` or `"onnx"` (a
            file).
        overwrite: replace an existing destination that is not an earlier
            artifact of the same kind. Defaults to `False`.
        protect: paths that must survive: neither they nor the folders
            holding them may be replaced. Defaults to `()`.
        arg: the name of the argument (or CLI flag) in messages.

    Returns:
        The absolute destination path.
    """
    if kind not in KINDS:
        raise ValueError(f"Expected kind in {KINDS}. Received: kind={kind!r}")
    if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
        raise ValueError(f"Expected a path. Received: {arg}={path!r}")
    target = os.path.abspath(os.fspath(path))
    real = os.path.realpath(target)
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        raise ValueError(
            "The folder for the export does not exist. "
            f"Received: {arg}={os.fspath(path)!r}"
        )
    guarded = [os.getcwd(), os.path.expanduser("~")]
    for p in protect:
        p = os.path.realpath(os.fspath(p))
        guarded += [p, os.path.dirname(p)]
    for g in guarded:
        if _is_within(os.path.realpath(g), real):
            raise ValueError(
                f"Refusing to replace {target!r}: it is or holds {g!r} "
                "(the working directory, the home folder, the input model "
                f"or its folder). Received: {arg}={os.fspath(path)!r}"
            )
    if os.path.lexists(target):
        same = {
            "saved_model": is_saved_model_dir,
            "tflite": is_tflite_file,
            "onnx": is_onnx_file,
        }[kind](target)
        what = {
            "saved_model": "SavedModel folder",
            "tflite": "LiteRT file",
            "onnx": "ONNX file",
        }[kind]
        if os.path.isdir(target) and not os.path.islink(target):
            found = "a folder"
        else:
            found = "a file"
        if not same and not overwrite:
            raise ValueError(
                f"{target!r} exists and is {found}, not an earlier "
                f"{what}; pass overwrite=True (--overwrite) to replace it. "
                f"Received: {arg}={os.fspath(path)!r}"
            )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(
            f"Cannot write in {parent!r} (permission denied). "
            f"Received: {arg}={os.fspath(path)!r}"
        )
    return target


# A temporary export folder carries this marker (a random token that its
# name repeats, the host, the target); only folders with a valid marker
# older than `STALE_SECONDS` are ever removed by a later export.
_MARKER = ".keras-attn-export.json"
STALE_SECONDS = 3600


def _marker(path):
    """The marker of a temporary export folder, or `None` if it is not
    one of ours (no marker, or a token that its name does not repeat)."""
    try:
        with open(os.path.join(path, _MARKER)) as f:
            marker = json.load(f)
    except (OSError, ValueError):
        return None
    token = marker.get("token") if isinstance(marker, dict) else None
    if not isinstance(token, str) or not os.path.basename(path).endswith(
        "-" + token
    ):
        return None
    return marker


def clean_stale_temporaries(folder, prefix=_TMP_PREFIX, now=None):
    """Remove the temporary folders of exports killed more than
    `STALE_SECONDS` ago in `folder`: only folders named `prefix*` holding
    a marker we wrote. An earlier artifact that a killed export had moved
    aside (its target now missing) is moved back first. Returns the
    removed paths."""
    import time

    now = time.time() if now is None else now
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        path = os.path.join(folder, name)
        if not name.startswith(prefix) or os.path.islink(path):
            continue
        marker = _marker(path)
        if marker is None or now - float(marker.get("time", now)) < (
            STALE_SECONDS
        ):
            continue
        old, target = os.path.join(path, "old"), marker.get("target")
        if (
            isinstance(target, str)
            and os.path.dirname(target) == os.path.abspath(folder)
            and os.path.lexists(old)
            and not os.path.lexists(target)
        ):
            with contextlib.suppress(OSError):
                os.replace(old, target)  # the earlier artifact comes back
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _temporary_dir(parent=None, prefix=_TMP_PREFIX, target=None):
    """A fresh temporary folder with our marker (see `_marker`)."""
    import secrets
    import socket
    import time

    parent = parent or tempfile.gettempdir()
    clean_stale_temporaries(parent, prefix)
    token = secrets.token_hex(8)
    path = os.path.join(parent, f"{prefix}{os.getpid()}-{token}")
    os.mkdir(path, 0o700)
    marker = {
        "token": token,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "time": time.time(),
        "target": target,
    }
    with open(os.path.join(path, _MARKER), "w") as f:
        json.dump(marker, f)
    return path


def _identity(path):
    """What is at `path` now: `None`, or (device, inode, is a folder)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, os.path.isdir(path)


class _Stage:
    """Write into a temporary path beside `target`; `swap` moves it in.

    A file replaces its target with one `os.replace` (the earlier file is
    hard-linked, or copied, aside first, for `undo`): a kill at any moment
    leaves the earlier file or the new one. A folder takes two renames; a
    killed export's earlier folder is moved back by the next export. The
    target is checked again just before the move: whatever appeared or
    changed there since the export began is left alone (an error)."""

    def __init__(self, target):
        self.target = target
        self.before = _identity(target)
        self.tmp_dir = _temporary_dir(os.path.dirname(target), target=target)
        self.tmp = os.path.join(self.tmp_dir, "new")
        self.old = os.path.join(self.tmp_dir, "old")
        self.moved_old = self.moved_new = False

    def swap(self):
        if not os.path.lexists(self.tmp):
            raise RuntimeError(f"The export wrote nothing at {self.tmp!r}.")
        if _identity(self.target) != self.before:
            raise ValueError(
                f"{self.target!r} changed while the export ran (something "
                "else wrote there); it is left as it is and nothing was "
                "replaced."
            )
        is_file = not os.path.isdir(self.tmp)
        if self.before is not None and is_file and not self.before[2]:
            try:
                os.link(self.target, self.old)
            except OSError:
                shutil.copy2(self.target, self.old)
            self.moved_old = "linked"
        elif self.before is not None:
            os.replace(self.target, self.old)
            self.moved_old = True
        os.replace(self.tmp, self.target)
        self.moved_new = True

    def undo(self):
        if self.moved_new and self.moved_old == "linked":
            os.replace(self.old, self.target)  # one rename back
            return
        if self.moved_new:
            if os.path.isdir(self.target) and not os.path.islink(self.target):
                shutil.rmtree(self.target, ignore_errors=True)
            elif os.path.lexists(self.target):
                os.remove(self.target)
        if self.moved_old:
            os.replace(self.old, self.target)

    def cleanup(self):
        shutil.rmtree(self.tmp_dir, ignore_errors=True)


@contextlib.contextmanager
def staged(*targets):
    """Yield temporary paths for `targets`; on success move every one into
    place, all or nothing: if a move fails, the ones done are undone."""
    stages = []
    try:
        for target in targets:
            stages.append(_Stage(os.path.abspath(target)))
        yield [s.tmp for s in stages]
        done = []
        try:
            for stage in stages:
                done.append(stage)
                stage.swap()
        except BaseException:
            for stage in reversed(done):
                with contextlib.suppress(OSError):
                    stage.undo()
            raise
    finally:
        for s in stages:
            s.cleanup()


@contextlib.contextmanager
def atomic_path(target):
    """Yield a temporary path; on success move it to `target`."""
    target = os.path.abspath(target)
    if not os.path.isdir(os.path.dirname(target)):
        raise ValueError(
            "The folder for the export does not exist. "
            f"Received: path={target!r}"
        )
    with staged(target) as (tmp,):
        yield tmp


# The SavedModel output of a raw-text model counting each text's known
# words (ids above the padding and out-of-vocabulary ids), so that a
# serving client can tell "no known word" as the other formats do.
KNOWN_WORDS = "known_words"


def _serving_module(model, input_signature=None, vectorizer=None):
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
            if vectorizer is not None:
                ids = vectorizer(args[0])  # (B, T)
                outputs = {
                    **outputs,
                    KNOWN_WORDS: tf.reduce_sum(
                        tf.cast(ids > 1, tf.int32), axis=-1
                    ),
                }
            return outputs

    return Served()


def _write_saved_model(model, tmp, input_signature=None, vectorizer=None):
    import tensorflow as tf

    # A plain tf.Module stores each variable once (keras.export's archive
    # wrote the weights twice in Keras 3.15).
    served = _serving_module(model, input_signature, vectorizer)
    tf.saved_model.save(
        served, tmp, signatures={"serving_default": served.serve}
    )


def export_saved_model(
    model, path, input_signature=None, overwrite=False, protect=()
):
    """Write a TF-Serving SavedModel with a `serving_default` signature.

    Args:
        model: a built Keras model. Its outputs may be a tensor or a dict of
            named tensors; the signature returns the same names.
        path: target directory.
        input_signature: list of `tf.TensorSpec`. Defaults to one spec per
            model input, built from the model's input shapes and dtypes (a
            string model therefore takes a batch of raw strings).
        overwrite: replace `path` even when it is not an earlier SavedModel.
            Defaults to `False`.
        protect: paths never to replace (see `check_destination`).
    """
    target = check_destination(
        path, "saved_model", overwrite, protect, arg="path"
    )
    with staged(target) as (tmp,):
        _write_saved_model(model, tmp, input_signature)
    return path


def export_module(module, path, signatures, overwrite=False):
    """Save a `tf.Module` as a SavedModel with `signatures` (`{name:
    tf.function}`), through the same destination checks and atomic move
    as `export_saved_model`."""
    import tensorflow as tf

    target = check_destination(path, "saved_model", overwrite)
    with staged(target) as (tmp,):
        tf.saved_model.save(module, tmp, signatures=signatures)
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
            vectorizer did). Not with unrolling, so not for a recurrent
            model in `"int8"`; an attention model in `"int8"` is then
            calibrated at each row's own length.
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
        if isinstance(out, dict):
            return out
        out = out if isinstance(out, (list, tuple)) else [out]
        return {f"output_{i}": o for i, o in enumerate(out)}

    frozen = _freeze(serve)
    module = tf.Module()
    module.serve = frozen
    with _scratch() as tmp:
        tf.saved_model.save(module, tmp, signatures={"serving_default": frozen})
        converter = tf.lite.TFLiteConverter.from_saved_model(tmp)
        return _convert(
            converter, quantize, representative_data, dynamic_length
        )


@contextlib.contextmanager
def _scratch():
    """A temporary folder under the system temp dir for intermediate
    SavedModels, removed afterwards; one left by a killed export is
    removed by the next export (its name carries the dead process id)."""
    path = _temporary_dir(prefix="keras-attn-scratch-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _convert(converter, quantize, representative_data, own_lengths=False):
    """`own_lengths`: calibrate each row at its own length (its ids up to
    the last non-zero one), as a variable-length model will run it."""
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
                if own_lengths:
                    row = row[
                        : max(1, int(np.flatnonzero(row).max(initial=0)) + 1)
                    ]
                yield [row[None]]

        converter.representative_dataset = representative
        converter.target_spec.supported_ops = [
            tf.lite.OpsSet.TFLITE_BUILTINS_INT8
        ]
    return converter.convert()


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


def export_tflite(
    model, path, overwrite=False, protect=(), metadata=None, **kwargs
):
    """`convert_tflite` and write the result atomically to `path`.

    Args:
        model, **kwargs: as `convert_tflite`.
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


def check_vocabulary_file(vectorizer, path, overwrite=False):
    """Raise unless `path` may receive the tokens of `vectorizer` (a
    `TextVectorization` layer or a list of tokens): it is new, holds the
    same tokens, or `overwrite`. Returns the file's text."""
    tokens = getattr(vectorizer, "get_vocabulary", lambda: vectorizer)()
    text = "".join(t + "\n" for t in tokens)
    target = os.path.abspath(path)
    if os.path.lexists(target) and not overwrite:
        same = os.path.isfile(target)
        if same:
            with open(target, "rb") as f:
                same = f.read() == text.encode("utf-8")
        if not same:
            raise ValueError(
                f"{target!r} exists and holds another vocabulary; pass "
                f"overwrite=True to replace it. Received: path={path!r}"
            )
    return text


def write_vocabulary(vectorizer, path, overwrite=False):
    """Write the tokens of `vectorizer` (a `TextVectorization` layer or a
    list of tokens), one per line. An existing file is replaced only when
    it holds the same tokens, or with `overwrite`."""
    text = check_vocabulary_file(vectorizer, path, overwrite)
    target = os.path.abspath(path)
    with atomic_path(target) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    return path


def _text_settings(quantize, calibration_texts, dynamic_length, names):
    """Check the LiteRT settings of a text export before any work."""
    if quantize not in QUANTIZATIONS:
        raise ValueError(
            f"Expected {names['quantize']} to be one of {QUANTIZATIONS}. "
            f"Received: {names['quantize']}={quantize!r}"
        )
    if quantize == "int8":
        if calibration_texts is None or len(calibration_texts) == 0:
            raise ValueError(
                f"quantize='int8' needs calibration texts ("
                f"{names['calibration_texts']}). Received: "
                f"{names['calibration_texts']}={calibration_texts!r}"
            )


_API_NAMES = {
    "quantize": "quantize",
    "calibration_texts": "calibration_texts",
    "dynamic_length": "dynamic_length",
    "saved_model": "saved_model",
    "tflite": "tflite",
    "onnx": "onnx",
}


def _text_tflite_bytes(
    text_model, quantize, calibration_texts, batch_size, dynamic_length
):
    vectorizer, token_model = split_text_model(text_model)
    representative = None
    if quantize == "int8":
        representative = np.asarray(
            vectorizer(np.asarray(list(calibration_texts), dtype=object))
        )
    data = convert_tflite(
        token_model,
        quantize=quantize,
        representative_data=representative,
        batch_size=batch_size,
        dynamic_length=dynamic_length,
    )
    vocabulary = "\n".join(vectorizer.get_vocabulary()) + "\n"
    config = artifact.artifact_config(
        artifact.TEXT_CLASSIFIER,
        max_length=int(token_model.inputs[0].shape[1]),
        quantize=quantize,
    )
    return with_metadata(
        data,
        {
            artifact.METADATA_VOCABULARY: vocabulary.encode("utf-8"),
            artifact.METADATA_CONFIG: json.dumps(config).encode("utf-8"),
        },
    )


def export_text_tflite(
    text_model,
    path,
    quantize="none",
    calibration_texts=None,
    batch_size=1,
    dynamic_length=False,
    overwrite=False,
    protect=(),
):
    """LiteRT model for a raw-text model, its vocabulary embedded.

    The `TextVectorization` step stays outside the graph (strings are not
    builtin LiteRT tensors); its vocabulary and the model's length travel
    inside the flatbuffer as metadata (`keras_attn.vocabulary`,
    `keras_attn.config`), so a model can never be paired with another
    model's vocabulary. `keras_attn_runtime` tokenizes the same
    way. `dynamic_length`: see `convert_tflite`.
    """
    export_text_model(
        text_model,
        tflite=path,
        quantize=quantize,
        calibration_texts=calibration_texts,
        batch_size=batch_size,
        dynamic_length=dynamic_length,
        overwrite=overwrite,
        protect=protect,
    )
    return path


def check_text_export(
    saved_model=None,
    tflite=None,
    quantize="none",
    calibration_texts=None,
    dynamic_length=False,
    overwrite=False,
    protect=(),
    names=None,
    onnx=None,
):
    """Every check of `export_text_model` that needs no model: settings
    and destinations. Returns `{kind: absolute path}`."""
    names = {**_API_NAMES, **(names or {})}
    if saved_model is None and tflite is None and onnx is None:
        raise ValueError(
            f"Nothing to export: give {names['saved_model']}, "
            f"{names['tflite']} and/or {names['onnx']}. Received: none"
        )
    targets = {}
    if saved_model is not None:
        targets["saved_model"] = check_destination(
            saved_model,
            "saved_model",
            overwrite,
            protect,
            names["saved_model"],
        )
    if tflite is not None:
        _text_settings(quantize, calibration_texts, dynamic_length, names)
        targets["tflite"] = check_destination(
            tflite, "tflite", overwrite, protect, names["tflite"]
        )
    if onnx is not None:
        targets["onnx"] = check_destination(
            onnx, "onnx", overwrite, protect, names["onnx"]
        )
    files = [targets[k] for k in ("tflite", "onnx") if k in targets]
    folder = targets.get("saved_model")
    if len(set(targets.values())) < len(targets) or (
        folder
        and any(
            _is_within(os.path.realpath(f), os.path.realpath(folder))
            for f in files
        )
    ):
        given = ", ".join(
            f"{names[k]}={v!r}"
            for k, v in (
                ("saved_model", saved_model),
                ("tflite", tflite),
                ("onnx", onnx),
            )
            if v is not None
        )
        raise ValueError(
            "The export destinations must not overlap. Received: " + given
        )
    return targets


def export_text_model(
    text_model,
    saved_model=None,
    tflite=None,
    quantize="none",
    calibration_texts=None,
    batch_size=1,
    dynamic_length=False,
    overwrite=False,
    protect=(),
    names=None,
    onnx=None,
):
    """SavedModel, LiteRT and/or ONNX export of a raw-text model, all or
    nothing.

    Every setting and destination is checked before any work, both
    artifacts are built in temporary folders, and only then moved into
    place together; on any error nothing is written or replaced.

    Args:
        text_model: `Input(string) → TextVectorization → token model`.
        saved_model: the SavedModel folder. Defaults to `None`.
        tflite: the `.tflite` file. Defaults to `None`.
        quantize, calibration_texts, batch_size, dynamic_length: the LiteRT
            settings (see `convert_tflite`).
        overwrite: replace destinations that are not earlier artifacts of
            their kind. Defaults to `False`.
        protect: paths never to replace. Defaults to `()`.
        names: argument names to use in error messages (the CLI passes
            its flags). Defaults to the Python argument names.
        onnx: the `.onnx` file: the token model through Keras's
            `export(format="onnx")` (int32 token ids in, float32 out; ONNX
            has no string ops), with the vocabulary and the length in its
            `metadata_props`. Defaults to `None`.

    Returns:
        `{"saved_model": path, "tflite": path, "onnx": path}` for what was
        written.
    """
    targets = check_text_export(
        saved_model,
        tflite,
        quantize,
        calibration_texts,
        dynamic_length,
        overwrite,
        protect,
        names,
        onnx,
    )
    split_text_model(text_model)  # the model has the expected shape
    data = None
    if tflite is not None:
        data = _text_tflite_bytes(
            text_model, quantize, calibration_texts, batch_size, dynamic_length
        )
    onnx_data = _text_onnx_bytes(text_model) if onnx is not None else None
    kinds = list(targets)
    with staged(*targets.values()) as tmps:
        for kind, tmp in zip(kinds, tmps, strict=True):
            if kind == "saved_model":
                _write_saved_model(
                    text_model,
                    tmp,
                    vectorizer=split_text_model(text_model)[0],
                )
            else:
                with open(tmp, "wb") as f:
                    f.write(data if kind == "tflite" else onnx_data)
    given = {"saved_model": saved_model, "tflite": tflite, "onnx": onnx}
    return {k: v for k, v in given.items() if v is not None}


def _text_onnx_bytes(text_model):
    """The token model as ONNX bytes, vocabulary and length inside."""
    import onnx

    vectorizer, token_model = split_text_model(text_model)
    with _scratch() as tmp:
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


def check_signature_quantize(quantize):
    """The quantizations `export_signatures_tflite` offers."""
    if quantize not in ("none", "float16", "dynamic"):
        raise ValueError(
            'Expected quantize to be "none", "float16" or "dynamic". '
            f"Received: quantize={quantize!r}"
        )


def export_signatures_tflite(
    functions, path, overwrite=False, metadata=None, quantize="none"
):
    """A LiteRT model with one signature per `tf.function`, builtin ops only.

    Args:
        functions: `{signature name: tf.function}`, each with an
            `input_signature` and returning a dict of named tensors (e.g.
            a decoder's `encode` and one-token `step`).
        path: the `.tflite` file to write.
        overwrite: replace `path` even when it is not a LiteRT file.
            Defaults to `False`.
        metadata: `{name: bytes}` stored in the file as LiteRT metadata
            (see `with_metadata`). Defaults to `None`.
        quantize: `"none"`, `"float16"` (float16 weights) or `"dynamic"`
            (int8 weights, float activations). Full-integer `"int8"` needs
            calibration data and is not offered here. Defaults to
            `"none"`.

    Variables become constants (no `READ_VARIABLE` ops); the file is
    written atomically.
    """
    import tensorflow as tf

    check_signature_quantize(quantize)
    target = check_destination(path, "tflite", overwrite)
    frozen = tf.Module()
    signatures = {}
    for name, function in functions.items():
        signatures[name] = _freeze(function)
        setattr(frozen, name, signatures[name])
    with _scratch() as tmp:
        # Gradients are not needed to convert; tracing them fails on the
        # frozen constants of Keras's int8 layers (custom gradients).
        no_gradients = tf.saved_model.SaveOptions(
            experimental_custom_gradients=False
        )
        tf.saved_model.save(frozen, tmp, signatures, options=no_gradients)
        converter = tf.lite.TFLiteConverter.from_saved_model(
            tmp, signature_keys=list(signatures)
        )
        data = _convert(converter, quantize, None)
    if metadata:
        data = with_metadata(data, metadata)
    with staged(target) as (tmp_path,):
        with open(tmp_path, "wb") as f:
            f.write(data)
    return path


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
