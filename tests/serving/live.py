"""A live `keras-attn serve` for the serving tests: the process on free
ports, started once it answers, and plain HTTP calls to it (TensorFlow
Serving's REST form, KServe v2's infer)."""

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

from tests.paths import ROOT

SHIPPED = os.path.join(ROOT, "saved_models")
REVIEWS = [
    "A wonderful film, moving and funny.",
    "The worst movie I have seen: boring, stupid and long.",
    "",
    "   ",
    "Not bad at all, though the ending drags.",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(*args, wait=240):
    """A `keras-attn serve` process and its port, once it answers."""
    port = free_port()
    command = [sys.executable, "-m", "keras_attn_cli", "serve"]
    # The server's log goes to a file: a pipe nobody reads would fill up
    # and stop the server.
    log = tempfile.TemporaryFile("w+")
    if "--grpc-port" not in args:  # one free port each, as for HTTP
        args = (*args, "--grpc-port", str(free_port()))
    grpc_port = int(args[list(args).index("--grpc-port") + 1])
    proc = subprocess.Popen(
        [*command, *args, "--port", str(port)],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    proc.log, proc.grpc_port = log, grpc_port
    deadline = time.time() + wait
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(output(proc))
        try:
            status, _ = get(port, "/v2/health/ready")
            if status == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise AssertionError("the server did not start")


def output(proc):
    proc.log.seek(0)
    return proc.log.read()[-3000:]


def request(port, method, path, body=None, headers=None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


def get(port, path):
    return request(port, "GET", path)


def infer(port, model, texts, outputs=()):
    """KServe v2's JSON infer of `texts` (BYTES) on `model` (a name, or
    `NAME/versions/N`): `(status, answer)`."""
    text = {"name": "text", "datatype": "BYTES", "shape": [len(texts)]}
    body = {"inputs": [{**text, "data": list(texts)}]}
    if outputs:
        body["outputs"] = [{"name": name} for name in outputs]
    return request(
        port,
        "POST",
        f"/v2/models/{model}/infer",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )


def post(port, model, body):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return request(port, "POST", f"/v1/models/{model}:predict", data)


def output_all(proc):
    proc.log.seek(0)
    return proc.log.read()


def scorer_model(path, factor):
    """A SavedModel at `path` whose answer (`score`) is the text's length
    times `factor`."""
    import tensorflow as tf

    class Scorer(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, text):
            n = tf.cast(tf.strings.length(text), tf.float32)
            return {"score": n * float(factor)}

    module = Scorer()
    tf.saved_model.save(
        module, str(path), signatures={"serving_default": module.serve}
    )
    return str(path)


def versioned_folder(root):
    """`root/scorer/1/` and `root/scorer/2/`: SavedModels whose answer is
    the text's length times their version."""
    for version in (1, 2):
        scorer_model(root / "scorer" / str(version), version)
    return str(root / "scorer")


def named(outputs, names):
    """A predict answer's outputs by name: TensorFlow Serving gives a
    model with one output its value alone."""
    if isinstance(outputs, dict):
        return outputs
    (name,) = names
    return {name: outputs}


def same_answer(a, b, where):
    """Two predict answers alike: the same keys, strings and shapes,
    numbers within float noise."""
    b = named(b, list(a))
    assert a.keys() == b.keys(), where
    for key in a:
        x, y = (
            np.asarray(a[key], dtype=object),
            np.asarray(b[key], dtype=object),
        )
        assert x.shape == y.shape, (where, key, x.shape, y.shape)
        if x.size and isinstance(x.reshape(-1)[0], str):
            assert x.tolist() == y.tolist(), (where, key)
        else:
            np.testing.assert_allclose(
                x.astype(float), y.astype(float), atol=1e-5, err_msg=where
            )
