"""`keras-attn serve`'s HTTP side: the routes and rules that KServe's
model server does not have. TensorFlow Serving's status and metadata
answers and its version routes, the body limit, the v2 infer body rule,
and the gate that keeps strangers out (routes that change what is served
and the OpenAPI pages off unless turned on; an optional bearer token on
every route but the health routes). ASGI middleware and FastAPI routes;
`keras_attn_cli.serving.serve` installs them on KServe's app.
"""

import json
import re
from urllib.parse import parse_qsl, urlencode

from keras_attn_cli.serving import access, plane, registry
from keras_attn_cli.serving import tf_serving_api as api


class _BodyTooLarge(Exception):
    pass


class BodyLimit:
    """ASGI middleware refusing a request body over `max_bytes` with a
    413, from its Content-Length before reading it, or as soon as a body
    sent in chunks goes past the limit."""

    def __init__(self, app, max_bytes):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit():
            if int(declared) > self.max_bytes:
                return await _json(send, 413, self._message(int(declared)))
        seen = 0

        async def limited():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise _BodyTooLarge(self._message(seen, at_least=True))
            return message

        return await self.app(scope, limited, send)

    def _message(self, size, at_least=False):
        return (
            f"Request body too large: at most {self.max_bytes} bytes "
            f"(--max-body-bytes). Received: {'over ' if at_least else ''}"
            f"{size} bytes"
        )


# Routes that answer without a token: liveness and readiness only.
HEALTH_ROUTES = ("/", "/v2/health/live", "/v2/health/ready")
# KServe's routes that change what is served, and its OpenAPI pages: off
# unless a flag turns them on.
MANAGEMENT_PREFIX = "/v2/repository/"
DOCS_ROUTES = ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")


def route_kind(path):
    """The kind of call (`keras_attn_cli.serving.access`) a REST route is."""
    if path in HEALTH_ROUTES:
        return access.HEALTH
    if path.startswith(MANAGEMENT_PREFIX):
        return access.MANAGEMENT
    if path in DOCS_ROUTES:
        return access.DOCS
    return access.OTHER


class Gate:
    """ASGI middleware: `keras_attn_cli.serving.access`'s rule on REST. A route
    that is off answers 404 naming the flag that turns it on; a call
    without the token 401."""

    def __init__(self, app, access):
        self.app, self.access = app, access

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        headers = dict(scope.get("headers") or [])
        refused = access.refusal(
            route_kind(path), headers.get(b"authorization", b""), self.access
        )
        if refused is None:
            return await self.app(scope, receive, send)
        if refused.off:
            return await _json(
                send,
                404,
                f"Not served: {path} is off (turned on by {refused.off})",
            )
        return await _json(
            send, 401, plane.UNAUTHORIZED, [(b"www-authenticate", b"Bearer")]
        )


class V2JsonBody:
    """ASGI middleware: a v2 infer request without the binary extension's
    `Inference-Header-Content-Length` is JSON, whatever its content type
    (the protocol says so, and `tritonclient.http` sends none); KServe
    parses it as JSON only under `application/json`."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path.startswith("/v2/models/") and path.endswith("/infer"):
            headers = list(scope.get("headers") or [])
            binary = b"inference-header-content-length"
            if not any(k == binary for k, _ in headers):
                headers = [(k, v) for k, v in headers if k != b"content-type"]
                headers.append((b"content-type", b"application/json"))
                scope = {**scope, "headers": headers}
        return await self.app(scope, receive, send)


class VersionRoutes:
    """ASGI middleware: TensorFlow Serving's version and label routes
    (`/v1/models/NAME/versions/N[:predict|/metadata]`, `.../labels/L...`)
    and KServe v2's (`/v2/models/NAME/versions/N/...`, and its
    `?model_version=N` query), each sent on to the model registered for
    that version; a version or label not served is a 404 naming it.
    `models`: the `Registry`, read at each request (versions come and
    go)."""

    ROUTE = re.compile(
        r"/(v1|v2)/models/([^/]+)/(versions|labels)/([^/:]+)(.*)"
    )
    # Any path that names a version or label: one ROUTE does not take
    # (an empty one, or one holding `:`) is a 404 here, never KServe's 501;
    # so is one whose model name holds a `:` (no served name does).
    NAMED = re.compile(r"/(v1|v2)/models/([^/]+)/(versions|labels)(/.*)?")
    V2 = re.compile(r"/v2/models/([^/:]+)(/.*)?")

    def __init__(self, app, models):
        self.app, self.models = app, models

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "") if scope["type"] == "http" else ""
        query = parse_qsl(
            (scope.get("query_string") or b"").decode("latin-1"),
            keep_blank_values=True,
        )
        asked = [v for k, v in query if k == "model_version"]
        if asked and self.V2.fullmatch(path):
            name, rest = self.V2.fullmatch(path).groups()
            try:
                key = self.models.key(name, version=asked[-1])
            except registry.NotServed as err:
                return await _json(send, 404, str(err))
            path = f"/v2/models/{key}{rest or ''}"
            kept = urlencode([(k, v) for k, v in query if k != "model_version"])
            scope = {
                **scope,
                "path": path,
                "raw_path": path.encode(),
                "query_string": kept.encode("latin-1"),
            }
        found = self.ROUTE.fullmatch(path)
        named = self.NAMED.fullmatch(path)
        if named and not found:
            _, name, kind, rest = named.groups()
            value = (rest or "/")[1:].split("/")[0]
            return await _json(
                send,
                404,
                f"Expected a served {kind[:-1]} of model {name!r} in the "
                f"path. Received: {kind}/{value}",
            )
        if found:
            protocol, name, kind, value, rest = found.groups()
            try:
                key = self.models.key(
                    name,
                    version=value if kind == "versions" else None,
                    label=value if kind == "labels" else None,
                )
            except registry.NotServed as err:
                return await _json(send, 404, str(err))
            path = f"/{protocol}/models/{key}{rest}"
            scope = {**scope, "path": path, "raw_path": path.encode()}
        return await self.app(scope, receive, send)


def read_token(path):
    """The bearer token in the file `path` (its one line), or `None`."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(
            f"Could not read --auth-token-file={path!r}: {err}"
        ) from None
    if not token or any(c.isspace() for c in token):
        raise ValueError(
            "Expected --auth-token-file to hold one token of printable "
            f"characters without spaces. Received: --auth-token-file={path!r}"
        )
    return token


async def _json(send, status, message, headers=()):
    body = json.dumps({"error": message}).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def add_tf_serving_routes(app, models, max_body_bytes, access=None):
    """TensorFlow Serving's status and metadata routes (KServe's own V1
    status answers `{"name", "ready"}`), registered before KServe's so
    that they take precedence, and the body limit."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    def find(name):
        """The model `name` names (`NAME`, or `NAME@N` from the version
        routes), or a 404 naming what is served (the plane's lookup)."""
        public, _, version = name.partition("@")
        try:
            return plane.find(models, public, version=version or None), None
        except plane.NotServed as err:
            return None, JSONResponse({"error": str(err)}, status_code=404)

    async def model_status(model_name: str):
        model, missing = find(model_name)
        if missing and model_name in models.failed:  # none loaded yet
            return api.status((), models.failed[model_name])
        if missing:
            return missing
        if "@" in model_name:  # one version, asked for by its number
            return api.status([model.version])
        return api.status(
            models.versions(model.public_name),
            models.failed.get(model.public_name),
        )

    async def model_metadata(model_name: str):
        model, missing = find(model_name)
        return missing or api.metadata(
            model.public_name, model.backend.signatures, str(model.version)
        )

    async def too_large(_, exc):
        return JSONResponse({"error": str(exc)}, status_code=413)

    async def invalid_body(_, exc):
        # FastAPI's own answer echoes the input, and fails (a 500) on
        # what JSON cannot write back, such as 1e999999 read as inf.
        where = [
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}"
            for e in exc.errors()[:5]
        ]
        return JSONResponse(
            {"error": f"Invalid request body: {'; '.join(where)}"},
            status_code=422,
        )

    app.add_api_route("/v1/models/{model_name}", model_status, methods=["GET"])
    app.add_api_route(
        "/v1/models/{model_name}/metadata", model_metadata, methods=["GET"]
    )
    app.add_exception_handler(_BodyTooLarge, too_large)
    app.add_exception_handler(RequestValidationError, invalid_body)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.add_middleware(V2JsonBody)
    app.add_middleware(VersionRoutes, models=models)
    app.add_middleware(Gate, access=access or {})  # outermost: first
