"""The artifact format that `keras_attn.export` writes and this runtime
reads: metadata keys, structural checks of a `.tflite` before LiteRT
parses it, bounds on sizes read from a file, ONNX external-data checks.

Trust: `verify_model` (every index and buffer size in range, no more
tables than the file's size can hold) turns the malformed files we know
of into a `ValueError`. LiteRT's C++ kernels are not hardened against
crafted models: run a `.tflite` from a stranger with `keras-attn
--sandbox`.
"""

import json
import os

import numpy as np

from keras_attn_runtime import legacy

# Names of the metadata entries that `keras_attn.export` writes into the
# flatbuffer, binding the vocabulary and settings to the model itself.
METADATA_VOCABULARY = "keras_attn.vocabulary"
METADATA_CONFIG = "keras_attn.config"
METADATA_SOURCE_VOCABULARY = "keras_attn.source_vocabulary"
METADATA_TARGET_VOCABULARY = "keras_attn.target_vocabulary"
# The streaming signatures' config in a file whose `keras_attn.config` is
# another kind's (a translator's one-call file that also streams).
METADATA_STREAMING = "keras_attn.streaming"
# The artifact kinds, as their `format` in the config, and the newest
# format version this runtime reads (a file of a newer version is refused
# with a clear message; files without a version are version 1). Writers
# write the oldest version that describes the file.
TEXT_CLASSIFIER = "keras_attn.text_classifier"
TRANSLATOR = "keras_attn.translator"
STREAMING_DECODER = "keras_attn.streaming_decoder"
# A translator's folder (`keras_attn.translation.Translator.save` writes
# it; `keras-attn translate`, `align` and `serve` read it): what each
# file is, and its name.
TRANSLATOR_FOLDER = {
    "saved_model": "saved_model",
    "litert": "model.tflite",
    "streaming": "streaming.tflite",
    "source_vocabulary": "source_vocabulary.txt",
    "target_vocabulary": "target_vocabulary.txt",
}
FORMAT_VERSION = 2  # 2: translators with WordPiece subwords (`subwords`)


def artifact_config(kind, **settings):
    """The `keras_attn.config` object an exporter writes for `kind`
    (version 1 unless `settings` name another)."""
    return {"format": kind, "version": 1, **settings}


def format_of(config):
    """The artifact kind a `keras_attn.config` object declares (`format`,
    or `keras_attn_runtime.legacy.format_of_0_2`), or `None`."""
    found = config.get("format")
    if found is None:
        found = legacy.format_of_0_2(config, TRANSLATOR)
    return found


# How a LiteRT file streams (`stream_layout`): a streaming file (only
# `prefill` and `decode` signatures), or a one-call file with streaming
# signatures beside its `translate`.
STREAMING_FILE, ONE_CALL_AND_STREAMING = "streaming", "one_call_and_streaming"


def stream_layout(entries):
    """How a LiteRT file with metadata `entries` streams (`STREAMING_FILE`
    or `ONE_CALL_AND_STREAMING`), or `None` when it has no streaming
    signatures: the one place that decides whether a file streams."""
    try:
        config = json.loads(entries.get(METADATA_CONFIG, b"{}"))
        streaming = format_of(config) == STREAMING_DECODER
    except (ValueError, AttributeError, TypeError):
        streaming = False
    if streaming:
        return STREAMING_FILE
    if METADATA_STREAMING in entries:
        return ONE_CALL_AND_STREAMING
    return None


def check_format(config, kind, model_path):
    """Raise a `ValueError` naming the file unless `config` (a dict) is a
    `kind` artifact of a version this runtime reads."""
    version = config.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise ValueError(
            f"Not a valid model: {model_path!r} declares format version "
            f"{version!r}"
        )
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{model_path!r} was written by a newer keras_attn (artifact "
            f"format version {version}); this runtime reads versions up to "
            f"{FORMAT_VERSION}: upgrade keras-attn-runtime."
        )
    found = format_of(config)
    if found is not None and found != kind:
        raise ValueError(
            f"Expected a {kind} artifact. Received: {model_path!r}, a {found!r}"
        )


_DTYPE_BYTES = {0: 4, 1: 2, 2: 4, 3: 1, 4: 8, 6: 1, 7: 2, 9: 1, 10: 8}


def _count_tables(schema, data):
    """Count the tables that unpacking `data` would create, lazily, and
    stop with a `ValueError` once the count passes what a file of this
    size can hold without sharing tables (each distinct table takes at
    least 4 bytes): a tiny file whose vectors all point at one shared
    table would otherwise unpack into millions of objects."""
    limit = len(data) // 4 + 1024
    count = 0

    def add(n):
        nonlocal count
        count += n
        if count > limit:
            raise ValueError(
                f"more tables than a {len(data)}-byte file can hold "
                "(shared tables)"
            )

    model = schema.Model.GetRootAs(data, 0)
    add(model.BuffersLength() + model.OperatorCodesLength())
    add(model.MetadataLength() + model.SubgraphsLength())
    for i in range(model.SignatureDefsLength()):
        sig = model.SignatureDefs(i)
        add(1 + sig.InputsLength() + sig.OutputsLength())
    for g in range(model.SubgraphsLength()):
        graph = model.Subgraphs(g)
        add(2 * graph.TensorsLength() + 2 * graph.OperatorsLength())
        for t in range(graph.TensorsLength()):
            tensor = graph.Tensors(t)
            add(tensor.ShapeLength() // 8 + tensor.VariantTensorsLength())
    return count


def _model_object(data):
    from ai_edge_litert import schema_py_generated as schema

    if len(data) < 16 or data[4:8] != b"TFL3":
        raise ValueError("not a LiteRT flatbuffer (no 'TFL3' identifier)")
    try:
        _count_tables(schema, bytearray(data))
    except ValueError:
        raise
    except Exception as err:  # a malformed table: any decoding error
        raise ValueError(
            f"malformed flatbuffer ({type(err).__name__})"
        ) from None
    try:
        return schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    except Exception as err:  # a malformed table: any decoding error
        raise ValueError(
            f"malformed flatbuffer ({type(err).__name__})"
        ) from None


def verify_model(data):
    """Check a `.tflite` flatbuffer's structure before LiteRT loads it.

    Every operator, tensor, buffer and signature index must be in range,
    shapes non-negative, and constant buffers as large as their tensors.
    Returns the decoded model object. Raises `ValueError` otherwise.
    """
    model = _model_object(data)
    if model.version != 3 or not vector(model.subgraphs):
        raise ValueError("unsupported schema version or no subgraph")
    buffers = vector(model.buffers)
    n_codes = len(vector(model.operatorCodes))
    for g, graph in enumerate(model.subgraphs):
        tensors = vector(graph.tensors)
        n = len(tensors)
        for tensor in tensors:
            if not 0 <= tensor.buffer < max(len(buffers), 1):
                raise ValueError(f"subgraph {g}: tensor buffer out of range")
            shape = [int(d) for d in vector(tensor.shape)]
            if any(d < 0 for d in shape):
                raise ValueError(f"subgraph {g}: negative tensor shape")
            data = vector(buffers[tensor.buffer].data) if buffers else []
            size = _DTYPE_BYTES.get(tensor.type)
            if len(data) and size and tensor.sparsity is None:
                want = size * int(np.prod(shape, dtype=np.int64))
                if len(data) < want:
                    raise ValueError(f"subgraph {g}: constant too short")
        ends = [*vector(graph.inputs), *vector(graph.outputs)]
        for op in vector(graph.operators):
            if not 0 <= op.opcodeIndex < n_codes:
                raise ValueError(f"subgraph {g}: opcode index out of range")
            ends += [*vector(op.inputs), *vector(op.outputs)]
            ends += list(vector(op.intermediates))
        if any(not -1 <= int(i) < n for i in ends):
            raise ValueError(f"subgraph {g}: tensor index out of range")
    for sig in vector(model.signatureDefs):
        if not 0 <= sig.subgraphIndex < len(model.subgraphs):
            raise ValueError("signature subgraph out of range")
        n = len(vector(model.subgraphs[sig.subgraphIndex].tensors))
        for item in [*vector(sig.inputs), *vector(sig.outputs)]:
            if not 0 <= item.tensorIndex < n:
                raise ValueError("signature tensor out of range")
    for entry in vector(model.metadata):
        if not 0 <= entry.buffer < len(buffers):
            raise ValueError("metadata buffer out of range")
    return model


def vector(value):
    """A flatbuffer vector field as a sequence (`None` → empty)."""
    return [] if value is None else value


def text(value):
    """A flatbuffer string field as `str` (the object API gives bytes)."""
    return value.decode() if isinstance(value, bytes) else value


def metadata(model):
    """`{name: bytes}` of a verified model object's metadata entries."""
    out = {}
    for entry in model.metadata or []:
        data = model.buffers[entry.buffer].data
        out[text(entry.name)] = (
            bytes(bytearray(data)) if data is not None else b""
        )
    return out


def load_verified(model_path):
    """`(bytes, model object)` of a `.tflite` file that passed
    `verify_model`; a `ValueError` naming the file otherwise."""
    if not os.path.isfile(model_path):
        raise ValueError(
            f"No such LiteRT model. Received: model_path={model_path!r}"
        )
    with open(model_path, "rb") as f:
        data = f.read()
    try:
        return data, verify_model(data)
    except ValueError as err:
        raise ValueError(
            f"Not a valid LiteRT model: {model_path!r} ({err})"
        ) from None


# The most tokens a model's metadata may declare: sizes are read from the
# file before anything runs, so they are bounded and checked.
MAX_METADATA_LENGTH = 1 << 14


def metadata_length(value, key, model_path, declared=None):
    """`value` (from a model file's metadata `key`) as a positive int no
    larger than `MAX_METADATA_LENGTH` nor than the model's `declared`
    input length; a `ValueError` naming the file otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        problem = "is not a positive integer"
    elif value > MAX_METADATA_LENGTH:
        problem = f"is over the limit of {MAX_METADATA_LENGTH} tokens"
    elif declared is not None and declared > 0 and value > declared:
        problem = f"is larger than the model's input length {declared}"
    else:
        return value
    raise ValueError(
        f"Not a valid model: {model_path!r} declares {key}={value!r}, which "
        f"{problem}."
    )


def length_axes(config, model_path):
    """`{output name: [axis, ...]}` from a text classifier's config: the
    axes of its outputs that follow the input's time axis. A file with a
    variable-length input pads them to its `max_length` (so that their
    declared sizes are true); the valid part is the input's own length.
    `{}` for files that declare none."""
    value = config.get("length_axes", {})
    if not isinstance(value, dict) or not all(
        isinstance(k, str)
        and isinstance(v, list)
        and all(type(a) is int and 0 < a < 8 for a in v)
        for k, v in value.items()
    ):
        raise ValueError(
            f"Not a valid LiteRT model: {model_path!r} (its length_axes "
            f"metadata is not {{output name: [axis, ...]}}: {value!r})"
        )
    return value


def check_external_data(proto, model_path):
    """Refuse an ONNX model whose external data lies outside its folder:
    an absolute path, a `..` step, or a symbolic link (onnxruntime before
    1.24.1 read such files byte for byte)."""
    folder = os.path.realpath(os.path.dirname(os.path.abspath(model_path)))
    for tensor in _onnx_tensors(proto.graph):
        for entry in tensor.external_data:
            if entry.key != "location":
                continue
            where = entry.value
            path = os.path.join(folder, where)
            parts = where.replace("\\", "/").split("/")
            if (
                os.path.isabs(where)
                or ".." in parts
                or os.path.realpath(path) != os.path.normpath(path)
                or not os.path.realpath(path).startswith(folder + os.sep)
            ):
                raise ValueError(
                    f"Refusing the ONNX model {model_path!r}: its external "
                    f"data location {where!r} is outside its folder or a "
                    "symbolic link."
                )


def _onnx_tensors(graph):
    """Every tensor of an ONNX graph, its subgraphs' included."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                yield from _onnx_tensors(attribute.g)
            for sub in attribute.graphs:
                yield from _onnx_tensors(sub)


def config_object(raw, model_path):
    """The JSON object of a model's `keras_attn.config` metadata (bytes,
    or text as ONNX's `metadata_props` hold it; `None`: the file has none,
    `{}`); a `ValueError` naming the file when it is not one."""
    if raw is None:
        return {}
    try:
        data = raw.encode("utf-8") if isinstance(raw, str) else bytes(raw)
        config = json.loads(data.decode("utf-8"))
    except (UnicodeError, ValueError, RecursionError):
        config = None
    if not isinstance(config, dict):
        raise ValueError(
            f"Not a valid model: {model_path!r} (its keras_attn.config "
            "metadata is not a JSON object)"
        )
    return config
