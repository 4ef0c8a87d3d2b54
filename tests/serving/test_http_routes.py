"""The HTTP rules of `keras-attn serve` on their own (`keras_attn_cli.
http_routes`), as ASGI middleware around a stand-in app: the body limit
(413 from the declared length, or once a chunked body passes it), the
gate (a route that is off is a 404 naming its flag; no token, a 401;
the health routes always open), and the token file's checks."""

import asyncio
import json
import types

import pytest

from keras_attn_cli.serving import http_routes, registry


async def _app(scope, receive, send):
    """Reads the whole body, answers 200 with its length."""
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = json.dumps({"read": size}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


def call(
    app, path="/v1/models/m:predict", headers=(), chunks=(b"{}",), query=b""
):
    """`(status, JSON body, headers)` of one request through `app`."""
    sent, pending = [], list(chunks)

    async def receive():
        body = pending.pop(0) if pending else b""
        return {
            "type": "http.request",
            "body": body,
            "more_body": bool(pending),
        }

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "path": path,
        "headers": list(headers),
        "query_string": query,
    }
    try:
        asyncio.run(app(scope, receive, send))
    except Exception as err:  # what the server would turn into an answer
        return type(err).__name__, str(err), {}
    start = sent[0]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], json.loads(body), dict(start["headers"])


def test_a_body_over_the_limit_is_refused_before_or_while_it_is_read():
    app = http_routes.BodyLimit(_app, max_bytes=10)
    assert call(app, chunks=[b"12345"])[:2] == (200, {"read": 5})
    status, body, _ = call(app, headers=[(b"content-length", b"11")])
    assert status == 413 and "Received: 11 bytes" in body["error"]
    assert "--max-body-bytes" in body["error"]
    kind, message, _ = call(app, chunks=[b"123456", b"789012"])
    assert kind == "_BodyTooLarge" and "over 12 bytes" in message


def test_the_gate_opens_by_kind_of_route_and_token():
    closed = http_routes.Gate(_app, {"token": "s3cret"})
    status, body, headers = call(closed)
    assert status == 401 and "--auth-token-file" in body["error"]
    assert headers[b"www-authenticate"] == b"Bearer"
    bearer = [(b"authorization", b"Bearer s3cret")]
    assert call(closed, headers=bearer)[0] == 200
    assert call(closed, headers=[(b"authorization", b"Bearer nope")])[0] == 401
    assert call(closed, path="/v2/health/ready")[0] == 200  # no token
    status, body, _ = call(closed, "/v2/repository/index", headers=bearer)
    assert status == 404 and "--enable-model-management" in body["error"]
    opened = http_routes.Gate(_app, {"model_management": True})
    assert call(opened, "/v2/repository/index")[0] == 200


def test_the_token_file_holds_one_printable_token(tmp_path):
    good = tmp_path / "token"
    good.write_text("s3cret\n")
    assert http_routes.read_token(str(good)) == "s3cret"
    assert http_routes.read_token(None) is None
    for text in ("", "two words\n"):
        bad = tmp_path / "bad"
        bad.write_text(text)
        with pytest.raises(ValueError, match="--auth-token-file="):
            http_routes.read_token(str(bad))
    with pytest.raises(ValueError, match="Could not read --auth-token-file"):
        http_routes.read_token(str(tmp_path / "missing"))


def served_models(**versions):
    """A `Registry` of stand-in models: each name's versions, the
    latest first (registered under the name, the others as
    `name@version`)."""
    models = {}
    for name, numbers in versions.items():
        for version in numbers:
            key = registry.key_of(name, version, max(numbers))
            models[key] = types.SimpleNamespace(
                public_name=name, version=version
            )
    return registry.Registry(models)


async def _echo(scope, receive, send):
    """Answers 200 with the path and query it was sent."""
    body = json.dumps(
        {"path": scope["path"], "query": scope["query_string"].decode()}
    ).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


def test_v2s_model_version_query_reaches_the_served_version():
    """KServe v2's `?model_version=N` (in its OpenAPI document) names a
    version as `/versions/N` does: a served one answers, another version
    or an unknown model is a 404 naming what is served."""
    models = served_models(m=(2, 1), solo=(1,))
    app = http_routes.VersionRoutes(_echo, models)
    infer = "/v2/models/m/infer"
    status, body, _ = call(app, infer, query=b"model_version=1&x=y")
    assert status == 200
    assert body == {"path": "/v2/models/m@1/infer", "query": "x=y"}
    assert call(app, infer, query=b"model_version=2")[1]["path"] == infer
    solo = "/v2/models/solo/infer"
    status, body, _ = call(app, solo, query=b"model_version=1")
    assert (status, body["path"]) == (200, solo)
    status, body, _ = call(app, infer, query=b"model_version=3")
    assert status == 404 and "no version '3'" in body["error"]
    status, body, _ = call(
        app, "/v2/models/nope/infer", query=b"model_version=1"
    )
    assert status == 404 and "Unknown model 'nope'" in body["error"]
    # Without the query, nothing changes.
    assert call(app, infer)[1] == {"path": infer, "query": ""}


def test_a_malformed_version_in_the_path_is_a_404_naming_it():
    """A version the route cannot read (empty, or starting with `:`) was
    passed on to KServe, which answered 501 "Model versioning not
    supported yet"; it is a 404 naming what was received, on v1 and v2."""
    app = http_routes.VersionRoutes(_echo, served_models(m=(1,)))
    for path in (
        "/v2/models/m/versions//ready",
        "/v2/models/m/versions/:x/ready",
        "/v2/models/m/versions",
        "/v1/models/m/versions/",
        "/v1/models/m/labels//metadata",
    ):
        status, body, _ = call(app, path)
        assert status == 404, path
        assert "Received: " in body["error"] and "'m'" in body["error"], body
    # A name no model has (schemathesis found KServe's 501 for it).
    status, body, _ = call(app, "/v2/models/m:/versions/null/ready")
    assert status == 404 and "Unknown model 'm:'" in body["error"], body
    status, body, _ = call(app, "/v2/models/m/versions/1/ready")
    assert (status, body["path"]) == (200, "/v2/models/m/ready")
