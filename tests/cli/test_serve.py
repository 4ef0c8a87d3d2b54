"""`keras-attn serve` over HTTP, as a TensorFlow Serving client sees it.

A real server process (KServe's, through the CLI) on a free port, and a
real HTTP client: both request forms, the translator's named signature,
every bad request, 16 concurrent clients, a clean shutdown, the trust
check. Slow tier; skipped where `kserve` (the `serve` extra) is missing.
"""

import concurrent.futures
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest

from tests.paths import ROOT

pytestmark = pytest.mark.slow
pytest.importorskip("kserve")

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
    proc = subprocess.Popen(
        [*command, *args, "--port", str(port)],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    proc.log = log
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


def post(port, model, body):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return request(port, "POST", f"/v1/models/{model}:predict", data)


@pytest.fixture(scope="module")
def server():
    proc, port = start("imdb_ssa", "translation_en_fr", "imdb_edge")
    yield port
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


@pytest.fixture(scope="module")
def saved_imdb():
    import tensorflow as tf

    path = os.path.join(SHIPPED, "imdb_ssa", "saved_model")
    return tf.saved_model.load(path).signatures["serving_default"]


def test_status_and_metadata_as_tensorflow_serving_gives_them(server):
    status, body = get(server, "/v1/models/imdb_ssa")
    assert status == 200
    assert body["model_version_status"][0]["state"] == "AVAILABLE"
    status, body = get(server, "/v1/models/translation_en_fr/metadata")
    assert status == 200
    defs = body["metadata"]["signature_def"]["signature_def"]
    assert {"serving_default", "translate", "translate_greedy"} <= set(defs)
    text = defs["translate"]["inputs"]["text"]
    assert text["dtype"] == "DT_STRING"
    assert text["tensor_shape"]["dim"] == [{"size": "-1", "name": ""}]


def test_both_forms_answer_as_the_saved_model(server, saved_imdb):
    import tensorflow as tf

    want = saved_imdb(text=tf.constant(REVIEWS))
    status, rows = post(server, "imdb_ssa", {"instances": REVIEWS})
    assert status == 200
    status, columns = post(server, "imdb_ssa", {"inputs": {"text": REVIEWS}})
    assert status == 200
    for key in ("probability", "attention", "known_words"):
        got_rows = np.array([r[key] for r in rows["predictions"]])
        np.testing.assert_allclose(got_rows, want[key].numpy(), atol=1e-6)
        np.testing.assert_allclose(
            np.array(columns["outputs"][key]), want[key].numpy(), atol=1e-6
        )


def test_translator_named_signature_and_blank_inputs(server):
    import tensorflow as tf

    texts = ["I am tired.", "", "   ", "Tom is here."]
    body = {"signature_name": "translate_greedy", "inputs": texts}
    status, got = post(server, "translation_en_fr", body)
    assert status == 200, got
    path = os.path.join(SHIPPED, "translation_en_fr", "saved_model")
    want = tf.saved_model.load(path).signatures["translate_greedy"](
        tf.constant(texts)
    )
    assert got["outputs"]["translation"] == [
        t.decode() for t in want["translation"].numpy()
    ]
    assert got["outputs"]["translation"][1:3] == ["", ""]


def test_litert_file_served_through_the_runtime(server):
    from keras_attn_runtime import LiteRTClassifier

    path = os.path.join(SHIPPED, "imdb_edge", "model_full_int8.tflite")
    want = LiteRTClassifier(path).predict(REVIEWS)["probability"]
    status, got = post(server, "imdb_edge", {"instances": REVIEWS})
    assert status == 200
    probability = [row["probability"] for row in got["predictions"]]
    np.testing.assert_allclose(probability, want, atol=1e-6)


def test_litert_backend_imports_no_tensorflow():
    path = os.path.join(SHIPPED, "imdb_edge", "model_full_int8.tflite")
    code = (
        "import sys, numpy as np\n"
        "from keras_attn_cli import commands, serve\n"
        f"b = serve.load_backend({path!r})\n"
        "b.run('serving_default', {'text': np.array([b'good'], object)})\n"
        "serve._kserve_model_class()\n"
        "print('tensorflow' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True
    )
    assert done.stdout.strip().splitlines()[-1] == "False", done.stderr


BAD_REQUESTS = {
    # KServe's words when the body is sent as JSON, ours otherwise.
    "malformed JSON": (
        b'{"instances": [',
        400,
        ("Malformed JSON", "Unrecognized request format"),
    ),
    "not an object": ([1, 2], 400, "Expected a JSON object"),
    "no instances": ({"examples": ["a"]}, 400, "'instances'"),
    "both forms": ({"instances": ["a"], "inputs": ["a"]}, 400, "exactly one"),
    "wrong type": ({"instances": [5]}, 400, "Expected a string"),
    "unknown signature": (
        {"signature_name": "nope", "instances": ["a"]},
        400,
        "Unknown signature_name 'nope'",
    ),
    "too many": ({"instances": ["a"] * 300}, 400, "Too many examples"),
    "text too long": ({"instances": ["a " * 60_000]}, 400, "Text too long"),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_bad_requests_get_a_4xx_naming_the_problem(server, case):
    body, code, words = BAD_REQUESTS[case]
    words = (words,) if isinstance(words, str) else words
    status, answer = post(server, "imdb_ssa", body)
    assert status == code, answer
    assert any(w in answer["error"] for w in words), answer
    status, _ = post(server, "imdb_ssa", {"instances": ["still here"]})
    assert status == 200


def test_unknown_model_is_a_404(server):
    status, answer = post(server, "nope", {"instances": ["a"]})
    assert status == 404 and "nope" in answer["error"]
    status, answer = get(server, "/v1/models/nope/metadata")
    assert status == 404 and "nope" in answer["error"]


def test_body_over_the_limit_is_refused_before_it_is_read(server):
    # Declared too large: answered without sending the body at all.
    connection = http.client.HTTPConnection("127.0.0.1", server, timeout=30)
    connection.putrequest("POST", "/v1/models/imdb_ssa:predict")
    connection.putheader("Content-Length", str(50 << 20))
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413
    assert "too large" in json.loads(response.read())["error"]
    connection.close()
    # Sent in chunks, without a length (http.client frames an iterator
    # as chunked): refused once it passes the limit (the fifth chunk).
    chunk = b"x" * (256 << 10)
    status, answer = request(
        server, "POST", "/v1/models/imdb_ssa:predict", body=iter([chunk] * 5)
    )
    assert status == 413 and "too large" in answer["error"]
    status, _ = post(server, "imdb_ssa", {"instances": ["still here"]})
    assert status == 200


def test_sixteen_concurrent_clients_get_the_sequential_answers(server):
    texts = [f"{REVIEWS[i % 5]} {i}" for i in range(48)]
    alone = [post(server, "imdb_ssa", {"instances": [t]})[1] for t in texts]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        together = list(
            pool.map(
                lambda t: post(server, "imdb_ssa", {"instances": [t]})[1],
                texts,
            )
        )
    for a, b in zip(alone, together, strict=True):
        np.testing.assert_allclose(
            a["predictions"][0]["probability"],
            b["predictions"][0]["probability"],
            atol=1e-6,
        )
        assert (
            a["predictions"][0]["known_words"]
            == (b["predictions"][0]["known_words"])
        )


def test_sigterm_finishes_requests_in_flight_and_exits_zero():
    proc, port = start("imdb_ssa")
    results = []
    long_batch = {"instances": [REVIEWS[0] * 20] * 200}
    thread = threading.Thread(
        target=lambda: results.append(post(port, "imdb_ssa", long_batch))
    )
    thread.start()
    time.sleep(0.3)  # the request is in flight
    proc.send_signal(signal.SIGTERM)
    thread.join(timeout=120)
    assert proc.wait(timeout=60) == 0, output(proc)
    assert results and results[0][0] == 200
    assert len(results[0][1]["predictions"]) == 200


def test_a_strangers_saved_model_is_refused_unless_allowed(tmp_path):
    import tensorflow as tf

    class Writer(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, text):
            tf.io.write_file("/tmp/keras_attn_serve_probe", text[0])
            return {"echo": text}

    module = Writer()
    path = str(tmp_path / "stranger")
    tf.saved_model.save(
        module, path, signatures={"serving_default": module.serve}
    )
    port = free_port()
    done = subprocess.run(
        [sys.executable, "-m", "keras_attn_cli", "serve", path]
        + ["--port", str(port)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "WriteFile" in done.stderr and "--allow-unsafe-ops" in done.stderr
    proc, port = start(path, "--allow-unsafe-ops")
    try:
        status, body = post(port, "stranger", {"inputs": ["x"]})
        assert status == 200 and body["outputs"] == ["x"]  # one output
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def test_two_server_processes_answer_the_same_model_alike():
    """What replicas behind a load balancer do (docs/serving.md): two
    processes serving one SavedModel give the same answers."""
    first, second = start("imdb_ssa"), start("imdb_ssa")
    try:
        answers = [
            post(port, "imdb_ssa", {"instances": REVIEWS})[1]
            for _, port in (first, second)
        ]
        assert answers[0] == answers[1]
    finally:
        for proc, _ in (first, second):
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0


def test_a_memory_failure_names_itself_and_the_server_goes_on(tmp_path):
    """A model that asks for more memory than there is: `predict` exits
    2 naming the bytes, `serve` answers that request with the same words
    and the next one as usual."""
    import tensorflow as tf

    spec = tf.TensorSpec([None], tf.string)

    class Greedy(tf.Module):
        @tf.function(input_signature=[spec])
        def huge(self, text):  # a constant folded, then not held
            extra = tf.reduce_sum(tf.fill([2**21, 2**21], 1.0)) * 0.0
            return {"probability": self.small(text)["probability"] + extra}

        @tf.function(input_signature=[spec])
        def small(self, text):
            n = tf.cast(tf.strings.length(text), tf.float32)
            return {"probability": tf.sigmoid(n / 10.0)}

    module = Greedy()
    path = str(tmp_path / "greedy")
    tf.saved_model.save(
        module,
        path,
        signatures={"serving_default": module.huge, "small": module.small},
    )
    asked = f"the model asked for {2**42 * 4:,} bytes"
    done = subprocess.run(
        [sys.executable, "-m", "keras_attn_cli", "predict", path, "a film"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and asked in done.stderr, done.stderr
    proc, port = start(path)
    try:
        status, body = post(port, "greedy", {"inputs": ["a film"]})
        assert status >= 500 and asked in json.dumps(body), body
        status, body = post(
            port, "greedy", {"signature_name": "small", "inputs": ["film"]}
        )
        assert status == 200, body
        np.testing.assert_allclose(body["outputs"], [1 / (1 + np.exp(-0.4))])
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
