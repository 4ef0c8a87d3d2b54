"""A version's warm-up, before it takes traffic: its first calls (graph
tracing, kernel choice, the first allocation of its buffers) made before
any client waits on them.

A SavedModel with TensorFlow Serving's warm-up file
(`assets.extra/tf_serving_warmup_requests`: TFRecords of
`PredictionLog`s, each a `PredictRequest`) replays its requests, as
TensorFlow Serving does; any other model runs each signature on inputs
made from the signature itself (a short text for each text input, ones
for numbers), on one example and on a merged batch, and a model that
streams decodes one short text.
"""

import os
import struct

import numpy as np

from keras_attn_runtime.opener import streams

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
# TensorFlow Serving's cap on the records a warm-up file may hold.
MAX_RECORDS = 1000
TEXT = "The first sentence a new version reads."


def records(path):
    """The records of the TFRecord file at `path` (each a length, its
    checksum, the bytes and theirs); a `ValueError` for a cut file."""
    with open(path, "rb") as f:
        data = f.read()
    out, at = [], 0
    while at < len(data):
        if at + 12 > len(data):
            raise ValueError(f"{path}: a record cut short at byte {at}")
        (length,) = struct.unpack("<Q", data[at : at + 8])
        start, end = at + 12, at + 12 + length
        if end + 4 > len(data):
            raise ValueError(f"{path}: a record cut short at byte {at}")
        out.append(data[start:end])
        at = end + 4
    return out


def file_requests(path):
    """`[(signature name, {input: array})]` of a warm-up file's predict
    requests (other logs, which take `tf.Example`s, are left out)."""
    from tensorflow_serving.apis import prediction_log_pb2

    from keras_attn_cli.serving import tensor_protos

    requests = []
    for data in records(path)[:MAX_RECORDS]:
        log = prediction_log_pb2.PredictionLog.FromString(data)
        if log.WhichOneof("log_type") != "predict_log":
            continue
        request = log.predict_log.request
        inputs = {
            name: tensor_protos.to_numpy(proto)
            for name, proto in request.inputs.items()
        }
        requests.append((request.model_spec.signature_name or None, inputs))
    return requests


def own_requests(backend, rows=(1, 4)):
    """`[(signature name, {input: array})]` made from `backend`'s
    signatures that clients call (those taking texts, and the default),
    each on `rows` examples."""
    from keras_attn_cli.serving import plane

    default = plane.signature_key(backend.signatures)
    requests = []
    for key, signature in backend.signatures.items():
        texts = all(d == "string" for d, _ in signature.inputs.values())
        if not (texts or key == default):
            continue  # a step of a stream's loop: warmed by a stream
        for count in rows:
            inputs = {
                name: _example(dtype, shape, count)
                for name, (dtype, shape) in signature.inputs.items()
            }
            requests.append((key, inputs))
    return requests


def _example(dtype, shape, rows):
    if dtype == "string":
        return np.array([TEXT.encode()] * rows, dtype=object)
    sizes = [rows] + [1 if n is None else n for n in (shape or [None])[1:]]
    return np.ones(sizes, dtype=dtype)


def warm_up(backend, run=None):
    """Warm `backend` (an opened artifact) up, its streams included;
    `run(key, inputs)`: how a call is made (by
    default `backend.run` on this thread; the server's runs on the
    thread that will serve the model).

    Returns `(calls, failure)`: the calls made, and the first failure of
    a call on inputs made from a signature (which a model may refuse;
    then it is served all the same, and `failure` says why), or `None`.
    A request of TensorFlow Serving's warm-up file that fails raises, as
    it fails the load in TensorFlow Serving."""
    from keras_attn_cli.serving import plane

    warm = None
    if backend.kind == "saved_model":
        warm = os.path.join(backend.path, WARMUP_FILE)
    own = not (warm and os.path.isfile(warm))
    requests = own_requests(backend) if own else file_requests(warm)
    run = run or backend.run
    calls, failure = 0, None
    for key, inputs in requests:
        try:
            run(plane.signature_key(backend.signatures, key), inputs)
        except Exception as err:  # noqa: BLE001 (a made-up input)
            if not own:
                raise
            failure = failure or " ".join(str(err).split())[:300]
            continue
        calls += 1
    if streams(backend):
        for _ in backend.stream(TEXT):
            pass
        calls += 1
    return calls, failure
