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
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tests.paths import ROOT
from tests.serving.live import (
    REVIEWS,
    SHIPPED,
    free_port,
    get,
    infer,
    named,
    output,
    output_all,
    post,
    request,
    same_answer,
    start,
    versioned_folder,
)

pytestmark = pytest.mark.slow
pytest.importorskip("kserve")

SHIPPED_NAMES = sorted(os.listdir(SHIPPED))  # every shipped model


SERVED_PROCESS = []


@pytest.fixture(scope="module")
def served():
    """`(HTTP port, gRPC port)` of a server of every shipped model."""
    proc, port = start(*SHIPPED_NAMES)
    SERVED_PROCESS[:] = [proc]
    yield port, proc.grpc_port
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


@pytest.fixture(scope="module")
def server(served):
    return served[0]


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


@pytest.mark.parametrize("model", ["imdb_edge", "imdb_micro", "imdb_ssa"])
@pytest.mark.parametrize("form", ["instances", "inputs"])
def test_an_empty_request_gets_no_rows_from_every_kind(server, model, form):
    # The LiteRT models answered 500: the server swapped the opener's
    # signatures for another type, which the empty-request path indexed.
    status, got = post(server, model, {form: []})
    assert status == 200, got
    answer = got["predictions" if form == "instances" else "outputs"]
    if isinstance(answer, dict):  # the columnar form: a batch per output
        assert answer and all(v == [] for v in answer.values()), answer
    else:
        assert answer == []


def test_a_client_asks_for_the_outputs_it_wants(server):
    # The row form gave every output: 8 x 500 attention weights a review.
    body = {"instances": REVIEWS[:2], "output_filter": ["probability"]}
    status, got = post(server, "imdb_ssa", body)
    assert status == 200, got
    _, full = post(server, "imdb_ssa", {"instances": REVIEWS[:2]})
    assert got["predictions"] == [
        row["probability"] for row in full["predictions"]
    ]
    body = {"inputs": REVIEWS[:2], "output_filter": ["attention"]}
    status, got = post(server, "imdb_edge", body)
    assert status == 200 and np.asarray(got["outputs"]).shape[:2] == (2, 8)
    body = {"instances": REVIEWS[:1], "output_filter": ["probabilty"]}
    status, got = post(server, "imdb_ssa", body)
    assert status == 400 and "'probabilty'" in got["error"], got


def test_client_errors_are_one_log_line_each(served):
    port, _ = served
    proc = SERVED_PROCESS[0]
    before = output_all(proc)
    bad = [
        ("imdb_ssa", b"{"),
        ("imdb_ssa", {"instances": [1, 2]}),
        ("imdb_edge", {"signature_name": "nope", "instances": ["x"]}),
        ("no_such_model", {"instances": ["x"]}),
    ]
    for model, body in bad:
        status, _ = post(port, model, body)
        assert 400 <= status < 500
    time.sleep(0.5)
    logged = output_all(proc)[len(before) :]
    assert "Traceback" not in logged, logged
    warnings = [line for line in logged.splitlines() if "WARNING" in line]
    assert len(warnings) >= 3, logged
    assert all(len(line) < 600 for line in warnings), warnings


def test_an_answered_request_is_one_log_line(served):
    # KServe's timing middleware logged two more lines a request, one of
    # them the whole process's CPU time as the request's.
    port, _ = served
    proc = SERVED_PROCESS[0]
    before = output_all(proc)
    status, _ = post(port, "imdb_edge", {"instances": REVIEWS[:1]})
    assert status == 200
    time.sleep(0.5)
    logged = output_all(proc)[len(before) :].splitlines()
    assert len(logged) == 1, logged
    # uvicorn writes the path as sent, or (newer releases) unquoted.
    assert any(
        f"POST /v1/models/imdb_edge{colon}predict" in logged[0]
        for colon in ("%3A", ":")
    ), logged


def test_a_model_name_and_a_log_level_of_ones_choosing():
    micro = os.path.join(SHIPPED, "imdb_micro", "model_int8.tflite")
    proc, port = start(
        micro, "--model-name", "sentiment", "--log-level", "warning"
    )
    try:
        status, got = get(port, "/v1/models/sentiment")
        assert status == 200, got
        status, _ = post(port, "sentiment", {"instances": ["fine"]})
        assert status == 200
        status, _ = get(port, "/v1/models/model_int8")
        assert status == 404
        time.sleep(0.5)
        # warning: no access log line for the requests that succeeded
        assert "POST /v1/models/sentiment:predict" not in output(proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def serve_exit(*args):
    """`(exit code, output)` of a `keras-attn serve` expected to fail."""
    done = subprocess.run(
        [sys.executable, "-m", "keras_attn_cli", "serve", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("busy", ["--port", "--grpc-port"])
def test_a_busy_port_is_refused_naming_the_flag(served, busy):
    # gRPC's SO_REUSEPORT let a second server share the first one's gRPC
    # port (clients' calls reached either); a busy HTTP port exited 3
    # with a uvicorn log line. Both said "serving" first.
    port, grpc_port = served
    taken = {"--port": port, "--grpc-port": grpc_port}[busy]
    ports = {"--port": free_port(), "--grpc-port": free_port(), busy: taken}
    flags = [str(part) for item in ports.items() for part in item]
    code, out, err = serve_exit("imdb_micro", *flags)
    assert code == 2, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert f"{busy}={taken}" in lines[0] and f":{taken}" in lines[0]
    assert "serving" not in out + err
    # The running server still answers alone on both ports.
    status, _ = post(port, "imdb_micro", {"instances": ["fine"]})
    assert status == 200


def test_litert_backend_imports_no_tensorflow():
    path = os.path.join(SHIPPED, "imdb_edge", "model_full_int8.tflite")
    code = (
        "import sys, numpy as np\n"
        "from keras_attn_cli import commands\n"
        "from keras_attn_cli.serving import kserve_model, served\n"
        f"b = served.load_backend({path!r})\n"
        "b.run('serving_default', {'text': np.array([b'good'], object)})\n"
        "kserve_model.served_model_class()\n"
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


SENTENCES = [
    "I am tired.",
    "Where is the station?",
    "She is reading a book in the garden this afternoon.",
    "",
    "We have to leave now.",
    "Hi.",
    "The cat sleeps on the warm red sofa near the window.",
    "Thank you very much!",
]


def test_merged_translator_requests_get_their_own_answers(server):
    """Concurrent translator requests are merged into one call, padded to
    its widest input, and each client gets exactly its answer alone: the
    same strings, arrays of the same shapes."""
    texts = [SENTENCES[i % len(SENTENCES)] for i in range(32)]
    texts = [
        f"{t} {i}" if i >= len(SENTENCES) and t else t
        for i, t in enumerate(texts)
    ]

    def ask(text):
        return post(server, "translation_en_fr", {"instances": [text]})[1]

    alone = [ask(t) for t in texts]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        together = list(pool.map(ask, texts))
    for text, a, b in zip(texts, alone, together, strict=True):
        same_answer(a["predictions"][0], b["predictions"][0], text)


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

    probe = str(tmp_path / "probe")  # written when the model runs

    class Writer(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, text):
            tf.io.write_file(probe, text[0])
            return {"echo": text}

    module = Writer()
    path = str(tmp_path / "stranger")
    tf.saved_model.save(
        module, path, signatures={"serving_default": module.serve}
    )
    port = free_port()
    done = subprocess.run(
        [sys.executable, "-m", "keras_attn_cli", "serve", path]
        + ["--port", str(port), "--grpc-port", "0"],
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
            extra = tf.reduce_sum(tf.fill([2**31, 2**31], 1.0)) * 0.0
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
    asked = f"the model asked for {2**62 * 4:,} bytes"
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


def test_nothing_a_stranger_calls_switches_a_model_off(server):
    """KServe's repository routes and the OpenAPI pages are off by
    default: 404, and the model still answers."""
    for verb in ("unload", "load"):
        status, answer = request(
            server, "POST", f"/v2/repository/models/imdb_ssa/{verb}"
        )
        assert status == 404, answer
        assert "--enable-model-management" in answer["error"]
    for path in ("/openapi.json", "/docs"):
        status, answer = get(server, path)
        assert status == 404 and "--enable-docs" in answer["error"]
    status, body = post(server, "imdb_ssa", {"instances": ["still here"]})
    assert status == 200 and len(body["predictions"]) == 1


def test_nothing_a_stranger_calls_over_grpc_switches_a_model_off(served):
    import grpc
    from kserve.protocol.grpc import grpc_predict_v2_pb2 as v2
    from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc as v2_grpc

    http_port, grpc_port = served
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = v2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.RepositoryModelUnload(
                v2.RepositoryModelUnloadRequest(model_name="imdb_ssa"),
                timeout=30,
            )
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "--enable-model-management" in refused.value.details()
        ready = v2.ModelReadyRequest(name="imdb_ssa")
        assert stub.ModelReady(ready, timeout=30).ready
    status, _ = post(http_port, "imdb_ssa", {"instances": ["still here"]})
    assert status == 200


def hostile_bodies():
    """Bodies no client should send, with the content types they come
    under: each must get a 4xx JSON naming the problem."""
    deep = b"[" * 100_000 + b"]" * 100_000
    return [
        (deep, "application/x-www-form-urlencoded"),
        (deep, "application/json"),
        (b'{"instances": ' + deep + b"}", "text/plain"),
        (b"\xff\xfe\x00garbage", "application/json"),
        (b'{"instances": [1e999999]}', "application/json"),
        (b'{"instances": "a"}', "application/json"),
        (b'{"inputs": {"text": [null]}}', "application/json"),
        (b'{"instances": [{"b64": "!!"}]}', "application/json"),
        (b"null", "application/json"),
        (b"", "application/json"),
    ]


def hostile_v2_bodies():
    """v2 infer bodies that parse as JSON but do not fit the model."""
    text = {"name": "text", "datatype": "BYTES", "shape": [1]}
    cases = [
        {"inputs": 5},
        {"inputs": [{"name": "text"}]},
        {"inputs": [{**text, "data": [5]}]},
        {"inputs": [{**text, "shape": [2], "data": ["a"]}]},
        {"inputs": [{**text, "datatype": "FP32", "data": [1.0]}]},
        {"inputs": [{**text, "data": ["a"] * 3}]},
        {"inputs": [{**text, "data": ["a"]}], "outputs": [{"name": "x"}]},
    ]
    return [(json.dumps(c).encode(), "application/json") for c in cases]


def test_hostile_bodies_get_a_4xx_and_the_server_goes_on(server):
    routes = {
        "/v1/models/imdb_ssa:predict": hostile_bodies(),
        "/v2/models/imdb_ssa/infer": hostile_bodies() + hostile_v2_bodies(),
    }
    for route, bodies in routes.items():
        for body, kind in bodies:
            status, answer = request(
                server, "POST", route, body=body, headers={"Content-Type": kind}
            )
            assert 400 <= status < 500, (route, body[:40], kind, status, answer)
            # Ours say "error"; FastAPI's unparsable-body answer, "detail".
            assert answer.get("error") or answer.get("detail"), answer
    status, _ = post(server, "imdb_ssa", {"instances": ["still here"]})
    assert status == 200


def grpc_calls_need_the_token(port):
    """Over gRPC: the health checks answer anyone; TensorFlow Serving's
    Predict is UNAUTHENTICATED without `authorization: Bearer TOKEN` in
    its metadata and answers with it."""
    pytest.importorskip("tensorflow_serving")
    import grpc
    import tensorflow as tf
    from kserve.protocol.grpc import grpc_predict_v2_pb2 as v2
    from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc as v2_grpc
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        health = v2_grpc.GRPCInferenceServiceStub(channel)
        assert health.ServerLive(v2.ServerLiveRequest(), timeout=30).live
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        call = predict_pb2.PredictRequest()
        call.model_spec.name = "imdb_edge"
        call.inputs["text"].CopyFrom(tf.make_tensor_proto(["a fine film"]))
        for metadata in ((), (("authorization", "Bearer wrong"),)):
            with pytest.raises(grpc.RpcError) as refused:
                stub.Predict(call, metadata=metadata, timeout=60)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        good = (("authorization", "Bearer s3cret-token"),)
        answer = stub.Predict(call, metadata=good, timeout=60)
        assert "probability" in answer.outputs


def test_a_token_closes_every_route_but_health(tmp_path):
    secret = tmp_path / "token"
    secret.write_text("s3cret-token\n")
    proc, port = start("imdb_edge", "--auth-token-file", str(secret))
    try:
        for path in ("/", "/v2/health/live", "/v2/health/ready"):
            assert get(port, path)[0] == 200, path
        body = json.dumps({"instances": ["a fine film"]}).encode()
        route = "/v1/models/imdb_edge:predict"
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            status, answer = request(port, "POST", route, body, headers)
            assert status == 401 and "--auth-token-file" in answer["error"]
            status, answer = request(
                port, "GET", "/v1/models/imdb_edge/metadata", None, headers
            )
            assert status == 401, answer
        good = {"Authorization": "Bearer s3cret-token"}
        status, answer = request(port, "POST", route, body, good)
        assert status == 200 and len(answer["predictions"]) == 1
        grpc_calls_need_the_token(proc.grpc_port)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    secret.write_text("two words")
    done = subprocess.run(
        [sys.executable, "-m", "keras_attn_cli", "serve", "imdb_edge"]
        + ["--auth-token-file", str(secret)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "--auth-token-file" in done.stderr


def test_tensorflow_serving_version_routes(server):
    status, body = get(server, "/v1/models/imdb_ssa/versions/1")
    assert status == 200
    assert body["model_version_status"][0]["version"] == "1"
    status, body = get(server, "/v1/models/imdb_ssa/versions/1/metadata")
    assert status == 200 and body["model_spec"]["name"] == "imdb_ssa"
    data = json.dumps({"instances": ["a fine film"]}).encode()
    pinned = request(
        server, "POST", "/v1/models/imdb_ssa/versions/1:predict", data
    )
    assert pinned == post(server, "imdb_ssa", {"instances": ["a fine film"]})
    for path in (
        "/v1/models/imdb_ssa/versions/2",
        "/v1/models/imdb_ssa/versions/2:predict",
        "/v1/models/imdb_ssa/labels/stable/metadata",
    ):
        method = "POST" if path.endswith(":predict") else "GET"
        status, body = request(server, method, path, data)
        assert status == 404 and "imdb_ssa" in body["error"], (path, body)


# `tritonclient`, in its own process: it and KServe clash when imported
# into one (kserve #3099). It prints what each route gave as JSON.
TRITON_CLIENT = """
import json, sys
import numpy as np
import tritonclient.grpc as tg
import tritonclient.http as th

http_port, grpc_port = sys.argv[1:3]
texts = np.array([t.encode() for t in json.loads(sys.argv[3])], dtype=object)
answers = {}
for module, port in ((th, http_port), (tg, grpc_port)):
    client = module.InferenceServerClient(f"127.0.0.1:{port}")
    key = module.__name__.split(".")[-1]
    assert client.is_server_ready() and client.is_model_ready("imdb_ssa")
    json_kw = {"as_json": True} if module is tg else {}
    meta = client.get_model_metadata("imdb_ssa", **json_kw)
    answers[key + " metadata"] = {
        side: [[t["name"], t["datatype"], [int(d) for d in t["shape"]]]
               for t in meta[side]]
        for side in ("inputs", "outputs")
    }
    for binary in (False, True):
        tensor = module.InferInput("text", [len(texts)], "BYTES")
        kwargs = {"binary_data": binary} if module is th else {}
        tensor.set_data_from_numpy(texts, **kwargs)
        result = client.infer("imdb_ssa", [tensor])
        answers[f"{key} {binary}"] = {
            n: result.as_numpy(n).tolist()
            for n in ("probability", "known_words")
        }
    for name in json.loads(sys.argv[4]):  # every shipped model
        tensor = module.InferInput("text", [len(texts)], "BYTES")
        tensor.set_data_from_numpy(texts)
        result = client.infer(name, [tensor])
        answers[f"{key} {name}"] = {
            n["name"]: result.as_numpy(n["name"]).tolist()
            for n in result.get_response(**json_kw)["outputs"]
        }
print(json.dumps(answers, default=lambda b: b.decode()))
"""


def test_triton_clients_get_what_rest_gives(served):
    """KServe v2 over HTTP (JSON and the binary extension) and gRPC,
    through NVIDIA's `tritonclient`: the metadata names the real inputs
    and outputs, and the answers are the REST API's."""
    pytest.importorskip("tritonclient")
    http_port, grpc_port = served
    texts = REVIEWS[:2] + ["Not bad at all."]
    done = subprocess.run(
        [sys.executable, "-c", TRITON_CLIENT, str(http_port)]
        + [str(grpc_port), json.dumps(texts), json.dumps(SHIPPED_NAMES)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout)
    _, rest = post(http_port, "imdb_ssa", {"inputs": texts})
    for key in ("http", "grpc"):
        assert answers[f"{key} metadata"]["inputs"] == [["text", "BYTES", [-1]]]
        outputs = {o[0]: o[1:] for o in answers[f"{key} metadata"]["outputs"]}
        assert outputs["probability"] == ["FP32", [-1, 1]]
        assert outputs["known_words"] == ["INT32", [-1]]
        for binary in (False, True):
            got = answers[f"{key} {binary}"]
            np.testing.assert_allclose(
                got["probability"], rest["outputs"]["probability"], rtol=1e-6
            )
            assert got["known_words"] == rest["outputs"]["known_words"]
        for name in SHIPPED_NAMES:
            _, own = post(http_port, name, {"inputs": texts})
            same_answer(answers[f"{key} {name}"], own["outputs"], name)


def test_tensorflow_serving_grpc_client_gets_what_rest_gives(served):
    pytest.importorskip("tensorflow_serving")
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import (
        get_model_metadata_pb2,
        get_model_status_pb2,
        model_service_pb2_grpc,
        predict_pb2,
        prediction_service_pb2_grpc,
    )

    http_port, grpc_port = served
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    for name in SHIPPED_NAMES:
        texts = ["I see."] if "translation" in name else REVIEWS[:2]
        call = predict_pb2.PredictRequest()
        call.model_spec.name = name
        call.inputs["text"].CopyFrom(tf.make_tensor_proto(texts))
        answer = stub.Predict(call, timeout=120)
        assert answer.model_spec.version.value == 1
        _, rest = post(http_port, name, {"inputs": texts})
        rest["outputs"] = named(rest["outputs"], list(answer.outputs))
        assert set(answer.outputs) == set(rest["outputs"])
        for key, proto in answer.outputs.items():
            got = tf.make_ndarray(proto)
            if got.dtype == object:
                rows = got.reshape(len(texts), -1)
                got = [[t.decode() for t in row] for row in rows]
                want = np.asarray(rest["outputs"][key], dtype=object)
                assert got == want.reshape(len(texts), -1).tolist(), key
            else:
                np.testing.assert_allclose(got, rest["outputs"][key], 1e-6)
    ask = get_model_metadata_pb2.GetModelMetadataRequest()
    ask.model_spec.name = "translation_en_fr"
    ask.metadata_field.append("signature_def")
    defs = get_model_metadata_pb2.SignatureDefMap()
    stub.GetModelMetadata(ask).metadata["signature_def"].Unpack(defs)
    assert {"serving_default", "translate"} <= set(defs.signature_def)
    text = defs.signature_def["translate"].inputs["text"]
    assert text.dtype == tf.string.as_datatype_enum
    status = get_model_status_pb2.GetModelStatusRequest()
    status.model_spec.name = "imdb_ssa"
    models = model_service_pb2_grpc.ModelServiceStub(channel)
    (version,) = models.GetModelStatus(status).model_version_status
    assert version.version == 1 and version.state == version.AVAILABLE
    for change, code in (
        (lambda c: c.model_spec.version.__setattr__("value", 2), "NOT_FOUND"),
        (lambda c: setattr(c.model_spec, "version_label", "x"), "NOT_FOUND"),
        (lambda c: setattr(c.model_spec, "name", "nope"), "NOT_FOUND"),
        (
            lambda c: c.inputs["text"].CopyFrom(tf.make_tensor_proto([1.0])),
            "INVALID_ARGUMENT",
        ),
        (
            lambda c: c.inputs["text"].CopyFrom(
                tf.make_tensor_proto(["a"] * 300)
            ),
            "INVALID_ARGUMENT",
        ),
    ):
        call = predict_pb2.PredictRequest()
        call.model_spec.name = "imdb_ssa"
        call.inputs["text"].CopyFrom(tf.make_tensor_proto(["x"]))
        change(call)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Predict(call, timeout=60)
        assert refused.value.code().name == code, refused.value.details()
    channel.close()


def test_numbered_versions_are_served_as_tensorflow_serving_serves_them(
    tmp_path,
):
    pytest.importorskip("tensorflow_serving")
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    folder = versioned_folder(tmp_path)
    body = json.dumps({"instances": ["abcd"]}).encode()
    proc, port = start(folder, "--model-versions", "all")
    try:
        status, answer = get(port, "/v1/models/scorer")
        assert [v["version"] for v in answer["model_version_status"]] == [
            "2",
            "1",
        ]
        assert post(port, "scorer", {"instances": ["abcd"]})[1] == {
            "predictions": [8.0]
        }
        for version, score in (("1", 4.0), ("2", 8.0)):
            route = f"/v1/models/scorer/versions/{version}"
            status, answer = request(port, "POST", route + ":predict", body)
            assert status == 200 and answer["predictions"] == [score]
            status, answer = get(port, route + "/metadata")
            assert answer["model_spec"]["version"] == version
            status, answer = infer(port, f"scorer/versions/{version}", ["abcd"])
            assert status == 200 and answer["outputs"][0]["data"] == [score]
        status, answer = request(
            port, "POST", "/v1/models/scorer/versions/3:predict", body
        )
        assert status == 404 and "no version '3'" in answer["error"]
        with grpc.insecure_channel(f"127.0.0.1:{proc.grpc_port}") as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            for version, score in ((None, 8.0), (1, 4.0)):
                call = predict_pb2.PredictRequest()
                call.model_spec.name = "scorer"
                if version is not None:
                    call.model_spec.version.value = version
                call.inputs["text"].CopyFrom(tf.make_tensor_proto(["abcd"]))
                answer = stub.Predict(call, timeout=60)
                assert answer.model_spec.version.value == (version or 2)
                assert tf.make_ndarray(answer.outputs["score"]).tolist() == [
                    score
                ]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    proc, port = start(folder)  # the latest only, by default
    try:
        status, answer = get(port, "/v1/models/scorer")
        assert [v["version"] for v in answer["model_version_status"]] == ["2"]
        status, _ = request(
            port, "POST", "/v1/models/scorer/versions/1:predict", body
        )
        assert status == 404
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    done = subprocess.run(
        [sys.executable, "-m", "keras_attn_cli", "serve", folder]
        + ["--model-versions", "1,5", "--grpc-port", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    assert "--model-versions=1,5" in done.stderr, done.stderr


# gRPC codes a client's own mistake may get; never UNKNOWN or INTERNAL.
CLIENT_ERRORS = {"INVALID_ARGUMENT", "NOT_FOUND", "UNIMPLEMENTED"}


def hostile_grpc_calls():
    """`(method, request bytes)` no client should send: bytes that are no
    message, and messages that parse but do not fit the model."""
    import tensorflow as tf
    from kserve.protocol.grpc import grpc_predict_v2_pb2 as v2
    from tensorflow_serving.apis import predict_pb2

    predict = "/tensorflow.serving.PredictionService/Predict"
    infer = "/inference.GRPCInferenceService/ModelInfer"
    calls = [(m, b"\xff\xfe\x00garbage") for m in (predict, infer)]
    calls += [(m, b"\x0a\x05hello") for m in (predict, infer)]

    def tf_call(change):
        call = predict_pb2.PredictRequest()
        call.model_spec.name = "imdb_ssa"
        call.inputs["text"].CopyFrom(tf.make_tensor_proto(["a film"]))
        change(call)
        return predict, call.SerializeToString()

    calls += [
        tf_call(lambda c: c.inputs["text"].string_val.append(b"more")),
        tf_call(lambda c: c.inputs["text"].tensor_shape.dim.add(size=2**40)),
        tf_call(lambda c: c.inputs["other"].CopyFrom(c.inputs["text"])),
        tf_call(lambda c: c.inputs["text"].__setattr__("dtype", 999)),
        tf_call(lambda c: c.model_spec.__setattr__("signature_name", "x")),
        tf_call(lambda c: c.inputs.pop("text")),
    ]

    def v2_call(**tensor):
        request = v2.ModelInferRequest(model_name="imdb_ssa")
        request.inputs.add(**tensor)
        return infer, request.SerializeToString()

    text = v2.InferTensorContents(bytes_contents=[b"a film"])
    calls += [
        v2_call(name="text", datatype="FP32", shape=[1], contents=text),
        v2_call(name="text", datatype="BYTES", shape=[3], contents=text),
        v2_call(name="nope", datatype="BYTES", shape=[1], contents=text),
        v2_call(name="text", datatype="BYTES", shape=[1, 1, 1], contents=text),
    ]
    return calls


def test_hostile_grpc_calls_get_a_client_error_and_the_server_goes_on(
    served,
):
    pytest.importorskip("tensorflow_serving")
    import grpc

    http_port, grpc_port = served
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        for method, body in hostile_grpc_calls():
            with pytest.raises(grpc.RpcError) as refused:
                channel.unary_unary(method)(body, timeout=60)
            code = refused.value.code().name
            assert code in CLIENT_ERRORS, (method, body[:40], code)
            assert refused.value.details(), (method, body[:40])
    status, _ = post(http_port, "imdb_ssa", {"instances": ["still here"]})
    assert status == 200
