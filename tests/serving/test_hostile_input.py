"""Hostile input against a real `keras-attn serve` process (slow tier):
every malformed field is a 4xx naming it, in the protocol's own error
form, before any model work; a prompt past the model's window is a 400
(`context_length_exceeded`) streamed or not; KServe's version query
reaches the served version; routes never served are out of the OpenAPI
document and answer without a traceback; gRPC honours
`--max-body-bytes`; silent connections are closed; every refusal is
one WARNING line and the log holds no traceback at the end. Then a
document-driven search (schemathesis) over the server's own OpenAPI
document finds no server error."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest

from tests.serving.live import SHIPPED, output_all, request, start

pytestmark = pytest.mark.slow
pytest.importorskip("kserve")

NAMES = ("imdb_edge", "translation_en_fr_lm")
HEADER_TIMEOUT = 2
LONG_PROMPT = " ".join(["word"] * 150)  # past the decoder-only window


@pytest.fixture(scope="module")
def hostile():
    for name in NAMES:
        if not os.path.isdir(os.path.join(SHIPPED, name)):
            pytest.skip(f"no shipped {name}")
    proc, port = start(
        *NAMES,
        "--enable-docs",
        "--header-timeout",
        str(HEADER_TIMEOUT),
        "--max-body-bytes",
        str(1 << 20),
    )
    yield proc, port
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def post_json(port, path, body):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return request(
        port, "POST", path, data, {"Content-Type": "application/json"}
    )


OPENAI_CASES = [
    # (route, body, status, param)
    ("completions", {"model": [], "prompt": "Hi."}, 400, "model"),
    ("completions", {"model": {}, "prompt": "Hi."}, 400, "model"),
    (
        "chat/completions",
        {"model": [], "messages": [{"role": "user", "content": "Hi."}]},
        400,
        "model",
    ),
    (
        "chat/completions",
        {
            "model": "translation_en_fr_lm",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": None}]}
            ],
        },
        400,
        "messages",
    ),
    (
        "chat/completions",
        {
            "model": "translation_en_fr_lm",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": 5}]}
            ],
        },
        400,
        "messages",
    ),
    (
        "completions",
        {"model": "translation_en_fr_lm", "prompt": "I am \udc80 here."},
        400,
        "prompt",
    ),
    (
        "chat/completions",
        {
            "model": "translation_en_fr_lm",
            "messages": [{"role": "user", "content": "I am \udc80."}],
        },
        400,
        "messages",
    ),
]


@pytest.mark.parametrize("route, body, status, param", OPENAI_CASES)
def test_malformed_openai_fields_are_a_4xx_naming_them(
    hostile, route, body, status, param
):
    _, port = hostile
    # json.dumps escapes a lone surrogate as \udc80, as a client sends it.
    got, answer = post_json(port, f"/openai/v1/{route}", body)
    assert got == status, answer
    assert answer["error"]["param"] == param
    assert answer["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", ["completions", "chat/completions"])
def test_a_prompt_past_the_window_is_a_400_before_any_stream(
    hostile, route, stream
):
    _, port = hostile
    body = {"model": "translation_en_fr_lm", "stream": stream}
    if route == "completions":
        body["prompt"] = LONG_PROMPT
    else:
        body["messages"] = [{"role": "user", "content": LONG_PROMPT}]
    got, answer = post_json(port, f"/openai/v1/{route}", body)
    assert got == 400, answer
    assert answer["error"]["code"] == "context_length_exceeded"
    assert "tokens (the model's window)" in answer["error"]["message"]


def test_v1_and_v2_refuse_the_same_prompt_naming_the_window(hostile):
    _, port = hostile
    got, answer = post_json(
        port,
        "/v1/models/translation_en_fr_lm:predict",
        {"instances": [LONG_PROMPT]},
    )
    assert got == 400 and "the model's window" in answer["error"]
    text = {"name": "text", "datatype": "BYTES", "shape": [1]}
    body = {"inputs": [{**text, "data": [LONG_PROMPT]}]}
    got, answer = post_json(port, "/v2/models/translation_en_fr_lm/infer", body)
    assert got == 400 and "the model's window" in answer["error"]


def test_a_lone_surrogate_on_v1_predict_is_a_400(hostile):
    _, port = hostile
    body = json.dumps({"instances": ["A \udc80 film"]}).encode()
    path = "/v1/models/imdb_edge:predict"
    # As JSON, KServe's parser refuses it; sent as curl -d sends it (a
    # form content type), the body reaches TensorFlow Serving's rules.
    for kind in ("application/json", "application/x-www-form-urlencoded"):
        got, answer = request(port, "POST", path, body, {"Content-Type": kind})
        assert got == 400 and "surrogate" in answer["error"], answer


def test_v2s_model_version_query_answers_or_is_a_404(hostile):
    _, port = hostile
    text = {"name": "text", "datatype": "BYTES", "shape": [1]}
    body = {"inputs": [{**text, "data": ["A fine film."]}]}
    path = "/v2/models/imdb_edge/infer"
    plain, want = post_json(port, path, body)
    got, answer = post_json(port, path + "?model_version=1", body)
    assert plain == got == 200
    assert answer["outputs"] == want["outputs"]
    got, answer = post_json(port, path + "?model_version=2", body)
    assert got == 404 and "no version '2'" in answer["error"]
    got, answer = post_json(port, "/v2/models/nope/infer?model_version=1", body)
    assert got == 404 and "Unknown model" in answer["error"]


def test_the_document_lists_only_routes_that_answer(hostile):
    _, port = hostile
    got, document = request(port, "GET", "/openapi.json")
    assert got == 200
    paths = document["paths"]
    assert not any(":explain" in p or "/repository/" in p for p in paths)
    for path in (
        "/v1/models/{model_name}:predict",
        "/openai/v1/completions",
        "/openai/v1/chat/completions",
        "/v2/models/{model_name}/infer",
    ):
        assert "requestBody" in paths[path]["post"], path
    got, _ = post_json(port, "/v1/models/imdb_edge:explain", {})
    assert got == 501
    got, _ = post_json(port, "/v2/repository/models/imdb_edge/unload", {})
    assert got == 404  # off unless --enable-model-management
    for page in ("/docs", "/redoc"):
        connection_status = _status(port, page)
        assert connection_status == 200, page


def _status(port, path):
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    finally:
        connection.close()


def test_grpc_refuses_a_request_over_max_body_bytes(hostile):
    pytest.importorskip("tensorflow_serving")
    import grpc
    from tensorflow_serving.apis import predict_pb2

    proc, _ = hostile
    call = predict_pb2.PredictRequest()
    call.model_spec.name = "imdb_edge"
    call.inputs["text"].dtype = 7  # DT_STRING
    call.inputs["text"].tensor_shape.dim.add(size=1)
    call.inputs["text"].string_val.append(b"a" * (5 << 19))  # 2.5 MiB
    predict = "/tensorflow.serving.PredictionService/Predict"
    with grpc.insecure_channel(f"127.0.0.1:{proc.grpc_port}") as channel:
        with pytest.raises(grpc.RpcError) as refused:
            channel.unary_unary(predict)(call.SerializeToString(), timeout=60)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_grpc_refusals_are_one_warning_line_each(hostile):
    pytest.importorskip("tensorflow_serving")
    import grpc
    from tensorflow_serving.apis import predict_pb2

    proc, _ = hostile
    before = output_all(proc)
    call = predict_pb2.PredictRequest()
    call.model_spec.name = "imdb_edge"
    call.model_spec.signature_name = "nope"
    predict = "/tensorflow.serving.PredictionService/Predict"
    with grpc.insecure_channel(f"127.0.0.1:{proc.grpc_port}") as channel:
        with pytest.raises(grpc.RpcError) as refused:
            channel.unary_unary(predict)(call.SerializeToString(), timeout=60)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    time.sleep(0.5)
    logged = output_all(proc)[len(before) :]
    warnings = [x for x in logged.splitlines() if "WARNING" in x]
    assert len(warnings) == 1 and "INVALID_ARGUMENT" in warnings[0], logged
    assert "ERROR" not in logged and "Traceback" not in logged, logged


def test_silent_connections_are_closed_after_the_header_timeout(hostile):
    _, port = hostile
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
    half = socket.create_connection(("127.0.0.1", port))
    half.sendall(b"POST /v1/models/imdb_edge:predict HTTP/1.1\r\nHost: x")
    deadline = time.monotonic() + HEADER_TIMEOUT + 10
    for sock in (*held, half):
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            assert sock.recv(64) == b""
        except ConnectionResetError:
            pass
        sock.close()
    got, metrics = _metrics(port)
    assert got == 200
    assert 'keras_attn_connections_closed_total{reason="header_timeout"}' in (
        metrics
    )


def _metrics(port):
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def test_the_openapi_document_fuzzed_finds_no_server_error(hostile, tmp_path):
    """Schemathesis over the server's own document: every operation,
    its examples and generated cases (`--max-examples` each), checked
    for server errors only (a 4xx is the right answer to most of
    them)."""
    st = shutil.which("st") or shutil.which("schemathesis")
    if st is None:
        pytest.skip("schemathesis is not installed (the dev extra)")
    _, port = hostile
    done = subprocess.run(
        [
            st,
            "run",
            f"http://127.0.0.1:{port}/openapi.json",
            "--checks",
            "not_a_server_error",
            "--max-examples",
            "15",
            "--phases",
            "examples,coverage,fuzzing",
            "--seed",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,  # its report folder, .schemathesis/
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    cases = re.search(r"(\d+) generated", done.stdout)
    assert cases and int(cases.group(1)) >= 300, done.stdout[-2000:]
    print(f"schemathesis: {cases.group(0)} cases, no server error")


def test_the_log_holds_no_traceback(hostile):
    """Last in this module: after every probe above, no traceback."""
    proc, _ = hostile
    logged = output_all(proc)
    assert "Traceback" not in logged, logged[-3000:]
