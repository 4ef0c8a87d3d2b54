"""`keras-attn serve`: models on KServe's model server, for TensorFlow
Serving's and KServe's clients, with requests merged into batches.

KServe's `ModelServer` (the `kserve` package, `pip install
'keras_attn[serve]'`) runs the HTTP server (uvicorn and FastAPI), health,
Prometheus metrics and KServe's v2 protocol; its V1 predict route is
TensorFlow Serving's. This module loads the models
(`keras_attn_cli.serving.served`: a model per name and version, one
engine at every door, its requests merged into batches; KServe's `Model`
for it is `kserve_model`'s), binds the ports and runs the servers.
The request and response rules are `keras_attn_cli.serving.tf_serving_api`'s and
`keras_attn_cli.serving.open_inference`'s; the HTTP routes KServe lacks and the
gate are `keras_attn_cli.serving.http_routes`'; the gRPC services are
`keras_attn_cli.serving.grpc_api`'s.
"""

import asyncio
import gc
import logging
import signal

from keras_attn_cli.serving import access as access_rule
from keras_attn_cli.serving import (
    connections,
    http_routes,
    kserve_model,
    openai_api,
    openai_routes,
    openapi_document,
    plane,
    registry,
    served,
    versions,
)
from keras_attn_cli.serving.limits import LOGGER, log_refusal

LOG_LEVELS = ("debug", "info", "warning", "error")
# The loggers of the server's parts: KServe's, uvicorn's (its access log
# is INFO) and ours (a client error is one WARNING line).
LOGGERS = (
    "kserve",
    "kserve.trace",
    "uvicorn",
    "uvicorn.access",
    "uvicorn.error",
)


def serve(
    sources,
    host,
    port,
    allow_unsafe,
    limits,
    batching,
    log=print,
    access=None,
    accelerator="cpu",
    log_level="info",
    watching=None,
    verify=None,
    prefer=None,
):
    """Load `sources` (`{name: versions.Source}`) and serve them until
    SIGTERM or SIGINT, which finish the requests in flight and return 0.
    `access`: `access.ACCESS`'s keys (a bearer token, the routes turned
    on, the gRPC port). `accelerator`: where LiteRT runs a `.tflite`
    (`"cpu"`, `"gpu"`, `"npu"`). `log_level`: one of `LOG_LEVELS`.
    `watching`: `{"poll_s": seconds between polls of the version folders
    (0: read once), "config": (read, poll_s) or None}` (`versions.
    Watcher`). `verify`: a `keras_attn_runtime.signing.Verifier` every
    version must pass before it is read, or `None`. `prefer`: the kind of
    file a folder holding several is served from (`--prefer`; `None`:
    the opener's order, a SavedModel first)."""
    if log_level not in LOG_LEVELS:
        raise ValueError(
            f"Expected log_level to be one of {LOG_LEVELS}. Received: "
            f"log_level={log_level!r}"
        )
    access = {**access_rule.ACCESS, **(access or {})}
    watching = {"poll_s": 1.0, "config": None, **(watching or {})}
    # Ports first: a busy one is refused before minutes of loading, and
    # before anything says "serving".
    sock = _listen(host, port, "--port")
    if access.get("grpc_port", 0):
        _listen(host, access["grpc_port"], "--grpc-port").close()
    models = registry.Registry()
    opening = {
        "allow_unsafe": allow_unsafe,
        "accelerator": accelerator,
        "prefer": prefer,
        "verify": verify,
    }
    load = served.version_loader(
        kserve_model.served_model_class(), limits, batching, log, opening
    )
    watcher = versions.Watcher(
        models, sources, load, log, watching["poll_s"], watching["config"]
    )
    try:
        watcher.start()
    except BaseException:
        sock.close()
        raise
    return _run_server(
        models, host, sock, limits, log, access, log_level, watcher
    )


def _grpc_services():
    from keras_attn_cli.serving import grpc_api

    if grpc_api.has_tensorflow_serving_api():
        return (
            "TensorFlow Serving's PredictionService and ModelService, KServe v2"
        )
    return (
        "KServe v2; TensorFlow Serving's gRPC API needs "
        f"`{grpc_api.INSTALL_TF_SERVING_API}`"
    )


class PortInUse(OSError):
    """A port that cannot be listened on (another process holds it, or
    the host is not this machine's); the message names the flag."""

    def __init__(self, flag, host, port):
        super().__init__(
            f"Could not listen on {host}:{port} (in use by another process, "
            f"or not an address of this machine): choose another {flag}. "
            f"Received: {flag}={port}"
        )


def _listen(host, port, flag):
    """A TCP socket listening on `host:port` (without SO_REUSEPORT: a
    port another server holds, gRPC's included, is refused), or
    `PortInUse` naming `flag`."""
    import socket

    try:
        return socket.create_server((host, port), backlog=2048)
    except OSError:
        raise PortInUse(flag, host, port) from None


def _serving_line(models, host, port, grpc_port):
    return (
        f"serving {sorted(models)} on http://{host}:{port} (TensorFlow "
        "Serving's REST API: /v1/models/NAME[:predict|/metadata]; KServe "
        "v2: /v2/models/NAME[/infer])"
        + (
            f" and gRPC {host}:{grpc_port} ({_grpc_services()})"
            if grpc_port
            else ""
        )
    )


# KServe's lines that say something untrue of this server (it serves
# OpenAI's routes itself, `keras_attn_cli.serving.openai_routes`).
UNTRUE_LINES = ("OpenAI endpoints not registered",)


def _untrue(record):
    return not any(line in record.getMessage() for line in UNTRUE_LINES)


def _set_log_level(level):
    """`level` on KServe's, uvicorn's and our loggers (KServe configures
    its own at import)."""
    number = getattr(logging, level.upper())
    for name in (*LOGGERS, LOGGER.name):
        logging.getLogger(name).setLevel(number)
    if not LOGGER.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(message)s")
        )
        LOGGER.addHandler(handler)


def _finish_app(rest, app, models, access):
    """KServe's app made ours: built, without its request timings, with
    our client errors (after KServe's handlers, to replace them), our
    title and the OpenAPI document of our routes."""
    rest.create_application()
    _without_request_timings(app)
    _client_error_handlers(app)
    app.title = "keras-attn serve"
    openapi_document.install(
        app,
        access.get("model_management"),
        lambda: {m.public_name for m in models.values()},
    )


def _without_request_timings(app):
    """KServe's app without its timing middleware, which logged two INFO
    lines a request (`kserve.trace`), the second the whole process's CPU
    time over the request as if it were the request's; under 16
    streaming clients it held Python's lock for about 15% of the event
    loop's samples. Each request still has its access log line, and the
    generative answers their timings on `/metrics`."""
    try:  # KServe's dependency, not ours: gone with it, nothing to leave out
        from timing_asgi import TimingMiddleware
    except ImportError:
        return
    app.user_middleware = [
        m for m in app.user_middleware if m.cls is not TimingMiddleware
    ]


def _client_error_handlers(app):
    """KServe logs each client error as an ERROR with its traceback; these
    answer the plane's status for it (`plane.ERRORS`) with `{"error":
    message}` and log one WARNING line: the method, the path, the status
    and the message. KServe's `:explain` (it needs an explainer this
    server never has) is a 501 this way, left out of the OpenAPI
    document."""
    from fastapi.responses import JSONResponse

    def handler(status):
        async def answer(request, exc):
            route = f"{request.method} {request.url.path}"
            log_refusal(status, route, exc)
            return JSONResponse({"error": str(exc)}, status_code=status)

        return answer

    for row in plane.error_table():
        app.add_exception_handler(row.kind, handler(row.status))


def _kserve_follows(server, models):
    """KServe's repository (its v2 routes' lookup) holding what `models`
    (the `Registry`) holds now, and after each of the watcher's swaps."""
    for key, model in models.items():
        server.register_model(model, key)

    def follow(removed, added):  # on the loop, as the swap
        repository = server.registered_models.get_models()
        for key in removed:
            repository.pop(key, None)
        for key, model in added.items():
            server.register_model(model, key)

    models.listeners.append(follow)


def _grpc_server(models, server, host, access, limits):
    """The gRPC server on `access["grpc_port"]` (built in the loop it
    runs on), or `None` when it is off."""
    grpc_port = access.get("grpc_port", 0)
    if not grpc_port:
        return None
    from keras_attn_cli.serving import grpc_api

    rpc, bound = grpc_api.build_server(
        models, server.dataplane, host, grpc_port, access, limits
    )
    if not bound:
        raise PortInUse("--grpc-port", host, grpc_port)
    return rpc


def _run_server(
    models, host, sock, limits, log, access, log_level="info", watcher=None
):
    import kserve
    import uvicorn
    from kserve.model_server import app
    from kserve.protocol.rest.server import RESTServer

    port = sock.getsockname()[1]
    server = kserve.ModelServer(
        http_port=port, enable_grpc=False, enable_latency_logging=False
    )
    _kserve_follows(server, models)
    http_routes.add_tf_serving_routes(
        app, models, limits["max_body_bytes"], access
    )
    generative = openai_routes.add_openai_routes(app, models)
    rest = RESTServer(
        "kserve.model_server:app",
        server.dataplane,
        server.model_repository_extension,
        port,
        grace_period=30,
    )
    rest.config.host = host
    rest.config.http = connections.limited_protocol(
        limits["header_timeout"], limits["max_connections"]
    )
    grpc_port = access.get("grpc_port", 0)
    stopping = []
    # uvicorn finishes the requests in flight on SIGTERM/SIGINT, then
    # raises the signal again: these handlers make that a clean exit.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, frame: stopping.append(number))

    async def run():
        watching = None
        rpc = _grpc_server(models, server, host, access, limits)
        # Both ports are bound: only now does the server say it serves.
        log(_serving_line(models, host, port, grpc_port))
        if generative:
            log(
                f"OpenAI's API for {generative}: {openai_api.PREFIX}/models, "
                "/completions, /chat/completions"
            )
        try:
            if rpc is not None:
                await rpc.start()
            kserve_logger = logging.getLogger("kserve")
            if _untrue not in kserve_logger.filters:
                kserve_logger.addFilter(_untrue)
            _finish_app(rest, app, models, access)
            _set_log_level(log_level)
            # What was built before serving (the models, the routes, the
            # libraries' objects, about 140,000 for a decoder-only
            # folder) stays out of the cyclic collector's passes, which
            # then cost what requests made: a full pass over them took
            # about 50 ms on two cores, a pause in every stream.
            gc.freeze()
            watching = asyncio.create_task(watcher.run()) if watcher else None
            await uvicorn.Server(rest.config).serve(sockets=[sock])
        finally:
            if watching is not None:
                watching.cancel()
            sock.close()
            if rpc is not None:
                await rpc.stop(grace=30)

    asyncio.run(run())
    log("stopped")
    return 0
