"""TensorFlow Serving's REST API, as data: requests in, responses out.

Pure functions over JSON values and NumPy arrays, with no server and no
TensorFlow, so that each rule is tested on its own.
`keras_attn_cli.serving.serve` puts them behind KServe's model server.

- A predict request is `{"instances": [...]}` (the row form: one entry per
  example, a value when the signature has one input, else an object of
  named inputs) or `{"inputs": ...}` (the columnar form: the batch of the
  one input, or an object of named batches), with an optional
  `"signature_name"` (default `"serving_default"`).
- The answer is `{"predictions": [...]}` for the row form (a value per
  example when there is one output, else an object per example) and
  `{"outputs": ...}` for the columnar form.
- Strings travel as UTF-8 text; a binary string is `{"b64": "..."}`.
"""

import base64
import binascii
import json

import numpy as np

from keras_attn_cli.serving import plane
from keras_attn_cli.serving.limits import RequestError, check_text


def parse_json(body):
    """A request body (bytes or text) as JSON; a parsed body unchanged."""
    if not isinstance(body, (bytes, bytearray, str)):
        return body
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RequestError(
            f"Malformed JSON in the request body: {err}"
        ) from None
    except RecursionError:
        raise RequestError(
            "Malformed JSON in the request body: nested too deep"
        ) from None


def _decode_string(value, where):
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as err:  # a lone surrogate ("\\udc80")
            raise RequestError(
                f"Expected valid Unicode text in {where}. Received: a lone "
                f"surrogate {value[err.start : err.end]!r} at character "
                f"{err.start}"
            ) from None
    if isinstance(value, dict) and set(value) == {"b64"}:
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise RequestError(
                f"Expected base64 text in {where}. Received: "
                f"{str(value['b64'])[:40]!r}"
            ) from None
    raise RequestError(
        f"Expected a string in {where}. Received: {_shown(value)}"
    )


def _shown(value):
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def _column(values, name, dtype, limits):
    """The batch of one input as a NumPy array, checked."""
    where = f"input {name!r}"
    if dtype == "string":
        column = []
        for i, value in enumerate(values):
            data = _decode_string(value, f"{where}, example {i}")
            check_text(data, f"{where}, example {i}", limits)
            column.append(data)
        return np.array(column, dtype=object).reshape(len(column))
    try:
        array = np.asarray(values)
    except ValueError as err:  # ragged nesting
        raise RequestError(
            f"Expected a rectangular array for {where}. Received: {err}"
        ) from None
    kind = np.dtype(dtype).kind
    if array.dtype.kind not in ("iub" if kind in "iu" else "iubf"):
        raise RequestError(
            f"Expected numbers of type {dtype} for {where}. Received: "
            f"values of type {array.dtype}"
        )
    return array.astype(dtype)


def parse_predict(body, signatures, limits):
    """`(signature name, {input: array}, form)` of a predict request, or a
    `RequestError` naming what is wrong. `form` is `"row"` or
    `"columnar"`; `limits` holds `max_instances` and `max_text_bytes`."""
    if not isinstance(body, dict):
        raise RequestError(
            "Expected a JSON object with 'instances' or 'inputs'. "
            f"Received: {_shown(body)}"
        )
    name = plane.signature_key(signatures, body.get("signature_name"))
    signature = signatures[name]
    forms = [key for key in ("instances", "inputs") if key in body]
    if len(forms) != 1:
        raise RequestError(
            "Expected exactly one of 'instances' (row form) or 'inputs' "
            f"(columnar form). Received keys: {sorted(body)}"
        )
    names = list(signature.inputs)
    if forms == ["instances"]:
        columns = _rows_to_columns(body["instances"], names)
    else:
        columns = _columnar(body["inputs"], names)
    plane.example_count(columns, limits)
    arrays = {
        key: _column(values, key, signature.inputs[key][0], limits)
        for key, values in columns.items()
    }
    return name, arrays, "row" if forms == ["instances"] else "columnar"


def output_filter(wanted, signature):
    """The outputs a client asked for (`"output_filter"`, as TensorFlow
    Serving's `PredictRequest.output_filter` names it; REST takes it as a
    list beside `"instances"`/`"inputs"`), or `None` for all; a
    `RequestError` for a name the signature lacks."""
    if wanted is None or (isinstance(wanted, list) and not wanted):
        return None
    if not isinstance(wanted, list) or not all(
        isinstance(n, str) for n in wanted
    ):
        raise RequestError(
            "Expected 'output_filter' to be a list of output names. "
            f"Received: {_shown(wanted)}"
        )
    unknown = sorted(set(wanted) - set(signature.outputs))
    if unknown:
        raise RequestError(
            f"Unknown output {unknown[0]!r} in 'output_filter'; this "
            f"signature has {sorted(signature.outputs)}"
        )
    return list(dict.fromkeys(wanted))


def filtered(outputs, wanted):
    """`outputs` limited to `wanted` (`output_filter`; `None`: all)."""
    if wanted is None:
        return outputs
    return {name: outputs[name] for name in wanted}


def _rows_to_columns(instances, names):
    if not isinstance(instances, list):
        raise RequestError(
            f"Expected 'instances' to be a list. Received: {_shown(instances)}"
        )
    columns = {key: [] for key in names}
    for i, row in enumerate(instances):
        named = isinstance(row, dict) and set(row) != {"b64"}
        if len(names) == 1 and not named:
            row = {names[0]: row}
        elif not named:
            raise RequestError(
                f"Expected instance {i} to be an object with the inputs "
                f"{names}. Received: {_shown(row)}"
            )
        if set(row) != set(names):
            raise RequestError(
                f"Expected instance {i} to hold the inputs {names}. "
                f"Received: {sorted(row)}"
            )
        for key in names:
            columns[key].append(row[key])
    return columns


def _columnar(inputs, names):
    if len(names) == 1 and not (
        isinstance(inputs, dict) and set(inputs) == set(names)
    ):
        inputs = {names[0]: inputs}
    if not isinstance(inputs, dict) or set(inputs) != set(names):
        raise RequestError(
            f"Expected 'inputs' to be an object with the inputs {names}. "
            f"Received: {_shown(inputs)}"
        )
    for key, values in inputs.items():
        if not isinstance(values, list):
            raise RequestError(
                f"Expected the batch of input {key!r} to be a list. "
                f"Received: {_shown(values)}"
            )
    return inputs


def _json_value(array):
    """A NumPy array (or scalar) as JSON: strings as UTF-8 text when they
    are, else `{"b64": ...}`."""
    array = np.asarray(array)
    if array.dtype.kind in "OSU":
        return _strings(array.tolist())
    return array.tolist()


def _strings(value):
    if isinstance(value, list):
        return [_strings(v) for v in value]
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(value).decode("ascii")}
    return value


def format_predict(outputs, form):
    """The response body for `outputs` (`{name: array}`, batch first)."""
    names = sorted(outputs)
    if form == "columnar":
        if len(names) == 1:
            return {"outputs": _json_value(outputs[names[0]])}
        return {"outputs": {k: _json_value(outputs[k]) for k in names}}
    columns = {k: _json_value(outputs[k]) for k in names}
    count = len(columns[names[0]]) if names else 0
    if len(names) == 1:
        return {"predictions": columns[names[0]]}
    return {
        "predictions": [{k: columns[k][i] for k in names} for i in range(count)]
    }


def status(versions=("1",), failed=None):
    """`GET /v1/models/NAME`: the versions served, each available, and
    those that failed to load (`failed`, `{version: message}`: END with
    the error, as TensorFlow Serving reports them), the newest first."""
    ok = {"error_code": "OK", "error_message": ""}
    states = {int(v): ("AVAILABLE", ok) for v in versions}
    for version, message in (failed or {}).items():
        error = {"error_code": "UNKNOWN", "error_message": message}
        states.setdefault(int(version), ("END", error))
    return {
        "model_version_status": [
            {"version": str(version), "state": state, "status": status}
            for version, (state, status) in sorted(states.items(), reverse=True)
        ]
    }


# NumPy dtype names and TensorFlow's DataType names: the REST metadata and
# the gRPC protos (`grpc_api`) both read them here.
TF_DTYPES = {
    "string": "DT_STRING",
    "float32": "DT_FLOAT",
    "float64": "DT_DOUBLE",
    "float16": "DT_HALF",
    "int8": "DT_INT8",
    "uint8": "DT_UINT8",
    "int16": "DT_INT16",
    "int32": "DT_INT32",
    "int64": "DT_INT64",
    "bool": "DT_BOOL",
}


def _tensor_info(name, dtype, shape):
    info = {"dtype": TF_DTYPES.get(dtype, "DT_INVALID"), "name": name}
    if shape is None:
        info["tensor_shape"] = {"dim": [], "unknown_rank": True}
    else:
        info["tensor_shape"] = {
            "dim": [
                {"size": str(-1 if d is None else d), "name": ""} for d in shape
            ],
            "unknown_rank": False,
        }
    return info


def metadata(name, signatures, version="1"):
    """`GET /v1/models/NAME/metadata`: the signature definitions, in the
    JSON that TensorFlow Serving gives."""
    defs = {}
    for key, signature in signatures.items():
        defs[key] = {
            "inputs": {
                k: _tensor_info(k, *v) for k, v in signature.inputs.items()
            },
            "outputs": {
                k: _tensor_info(k, *v) for k, v in signature.outputs.items()
            },
            "method_name": "tensorflow/serving/predict",
        }
    return {
        "model_spec": {"name": name, "signature_name": "", "version": version},
        "metadata": {"signature_def": {"signature_def": defs}},
    }
