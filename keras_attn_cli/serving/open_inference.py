"""KServe's v2 inference protocol (the Open Inference Protocol), as data.

Pure functions over NumPy arrays and plain values, with no server, so
that each rule is tested on its own; `keras_attn_cli.serving.serve` puts them
behind KServe's model server, whose REST and gRPC front ends decode the
JSON, binary-extension and protobuf forms into `(name, datatype, array)`
triples and encode the answer back.

- Model metadata lists each input and output with its v2 datatype
  (`BYTES` for text, `FP32`, `INT32`...) and shape, `-1` where a size
  varies.
- An infer request names each of the signature's inputs once; text comes
  as `BYTES`, one element an example (shape `[N]` or `[N, 1]`).
- The answer holds every output, batch first, text as `BYTES`.
"""

import numpy as np

from keras_attn_cli.serving import plane
from keras_attn_cli.serving.limits import RequestError, check_text

# NumPy dtype names (as a runtime `Signature` spells them) and their v2
# datatypes.
DATATYPES = {
    "string": "BYTES",
    "object": "BYTES",
    "bool": "BOOL",
    "uint8": "UINT8",
    "int8": "INT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "float16": "FP16",
    "float32": "FP32",
    "float64": "FP64",
}


def datatype(dtype):
    """The v2 datatype of a NumPy dtype (or its name)."""
    name = "string" if dtype == "string" else np.dtype(dtype).name
    if np.dtype(dtype if dtype != "string" else object).kind in "OSU":
        return "BYTES"
    if name not in DATATYPES:
        raise ValueError(f"No v2 datatype for {name!r}")
    return DATATYPES[name]


def tensor_metadata(specs):
    """`[{"name", "datatype", "shape"}]` of a signature's `inputs` or
    `outputs` (`{name: (dtype, shape)}`), `-1` for unknown sizes."""
    return [
        {
            "name": name,
            "datatype": datatype(dtype),
            "shape": [-1]
            if shape is None
            else [-1 if d is None else d for d in shape],
        }
        for name, (dtype, shape) in specs.items()
    ]


def parse_infer(tensors, signature, limits):
    """`{input: array}` of an infer request's `tensors` (`[(name,
    datatype, array)]`) for `signature`, checked: each input once, the
    datatypes, one example an element along the first axis, the same
    count for every input, and the request limits (`max_instances`,
    `max_text_bytes`). A `RequestError` names what is wrong."""
    expected = signature.inputs
    given = {}
    for name, kind, array in tensors:
        if name not in expected:
            raise RequestError(
                f"Unknown input {name!r}; this signature takes "
                f"{sorted(expected)}"
            )
        if name in given:
            raise RequestError(f"Input {name!r} given twice")
        want = datatype(expected[name][0])
        if kind != want:
            raise RequestError(
                f"Expected input {name!r} as {want}. Received: {kind}"
            )
        given[name] = _examples(np.asarray(array), name)
    missing = sorted(set(expected) - set(given))
    if missing:
        raise RequestError(
            f"Missing inputs {missing}; this signature takes {sorted(expected)}"
        )
    plane.example_count(given, limits)
    for name, array in given.items():
        if expected[name][0] == "string":
            given[name] = _texts(array, name, limits)
    return given


def _examples(array, name):
    """`array` with one example a row: `[N]` as it is, `[N, 1]` flattened
    for a one-value-per-example input."""
    if array.ndim == 2 and array.shape[1] == 1:
        return array.reshape(-1)
    if array.ndim != 1:
        raise RequestError(
            f"Expected input {name!r} to have shape [N] or [N, 1]. "
            f"Received: {list(array.shape)}"
        )
    return array


def _texts(array, name, limits):
    """A text column as an object array of bytes, each checked."""
    column = []
    for i, value in enumerate(array.tolist()):
        data = value.encode("utf-8") if isinstance(value, str) else value
        if not isinstance(data, bytes):
            raise RequestError(
                f"Expected bytes in input {name!r}, example {i}. "
                f"Received: {type(value).__name__}"
            )
        check_text(data, f"input {name!r}, example {i}", limits)
        column.append(data)
    return np.array(column, dtype=object).reshape(len(column))


def infer_outputs(outputs, wanted=None):
    """`[(name, datatype, array)]` of a model's `outputs` (`{name:
    array}`), those `wanted` (names; `None`: all), sorted by name, text as
    an object array of UTF-8 bytes."""
    unknown = sorted(set(wanted or ()) - set(outputs))
    if unknown:
        raise RequestError(
            f"Unknown outputs {unknown}; this model gives {sorted(outputs)}"
        )
    answer = []
    for name in sorted(wanted or outputs):
        array = np.asarray(outputs[name])
        if array.dtype.kind in "OSU":
            flat = [
                v.encode("utf-8") if isinstance(v, str) else bytes(v)
                for v in array.reshape(-1).tolist()
            ]
            array = np.array(flat, dtype=object).reshape(array.shape)
        answer.append((name, datatype(array.dtype), array))
    return answer


def v2_response(request, model_name, outputs):
    """KServe's `InferResponse` holding `outputs` (`[(name, datatype,
    array)]`), binary where the request asked for it."""
    from kserve import InferOutput, InferResponse

    binary = request.use_binary_outputs
    tensors = []
    for name, kind, array in outputs:
        tensor = InferOutput(name, list(array.shape), kind)
        tensor.set_data_from_numpy(array, binary_data=binary)
        tensors.append(tensor)
    return InferResponse(
        response_id=request.id or "",
        model_name=model_name,
        infer_outputs=tensors,
        use_binary_outputs=binary,
    )
