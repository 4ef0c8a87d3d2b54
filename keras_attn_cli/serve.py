"""`keras-attn serve`: models on KServe's model server, for TensorFlow
Serving's and KServe's clients, with requests merged into batches.

KServe's `ModelServer` (the `kserve` package, `pip install
'keras_attn[serve]'`) runs the HTTP server (uvicorn and FastAPI), health,
Prometheus metrics and KServe's v2 protocol; its V1 predict route is
TensorFlow Serving's. This module holds one `ServedModel` per model over
the artifact `keras_attn_runtime.opener` opens: a SavedModel (through the op
allowlist), a `.tflite` or `.onnx` file (through `keras_attn_runtime`,
without TensorFlow) or a `.keras` file, and starts the servers. The
request and response rules are `keras_attn_cli.tf_serving_api`'s and
`keras_attn_cli.open_inference`'s; the HTTP routes KServe lacks and the
gate are `keras_attn_cli.http_routes`'; the gRPC services are
`keras_attn_cli.grpc_api`'s.
"""

import asyncio
import concurrent.futures
import logging
import signal
import time

import numpy as np

from keras_attn_cli import access as access_rule
from keras_attn_cli import http_routes, openai_api, openai_routes
from keras_attn_cli import open_inference as oip
from keras_attn_cli import tf_serving_api as api
from keras_attn_cli.limits import (  # noqa: F401  (serve.LIMITS)
    LIMITS,
    LOGGER,
    log_refusal,
)
from keras_attn_runtime.opener import ModelError

BATCHING = {"max_batch_size": 32, "batch_wait_ms": 5.0}
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


# --- Models: the artifacts `keras_attn_runtime.opener` opens. ---


def load_backend(path, allow_unsafe=False, accelerator="cpu"):
    """The artifact at `path` (`keras_attn_cli.models.open_model`): a SavedModel
    folder, a `.tflite`, `.keras` or `.onnx` file (`accelerator`: where
    LiteRT runs a `.tflite`)."""
    from keras_attn_cli.models import open_model

    return open_model(
        path, accelerator, allow_unsafe=allow_unsafe, flag="MODEL"
    )


# --- Batching: concurrent requests merged into one model call. ---


class Batcher:
    """Runs a signature on merged requests: a request waits at most
    `wait_s` for others, and a call holds at most `max_rows` examples
    (a larger request runs alone). Calls run one at a time on `executor`.
    `split(outputs, start, count)` gives each request its part of a
    merged call (`Signature.own_part`)."""

    def __init__(self, run, max_rows, wait_s, executor, split):
        self.run, self.max_rows, self.wait_s = run, max_rows, wait_s
        self.executor, self.split = executor, split
        self.pending = []
        self.worker = None

    async def submit(self, inputs):
        future = asyncio.get_running_loop().create_future()
        rows = len(next(iter(inputs.values())))
        self.pending.append((inputs, rows, future))
        if self.worker is None or self.worker.done():
            self.worker = asyncio.create_task(self._work())
        return await future

    async def _work(self):
        loop = asyncio.get_running_loop()
        while self.pending:
            deadline = loop.time() + self.wait_s
            while (
                sum(r for _, r, _ in self.pending) < self.max_rows
                and loop.time() < deadline
            ):
                await asyncio.sleep(min(0.001, self.wait_s))
            taken, rows = [], 0
            while self.pending and (
                not taken or rows + self.pending[0][1] <= self.max_rows
            ):
                taken.append(self.pending.pop(0))
                rows += taken[-1][1]
            try:
                merged = {
                    key: np.concatenate([inputs[key] for inputs, _, _ in taken])
                    for key in taken[0][0]
                }
                out = await loop.run_in_executor(
                    self.executor, self.run, merged
                )
                results, start = [], 0
                for _, count, _ in taken:
                    alone = len(taken) == 1  # the call's own answer
                    results.append(
                        out if alone else self.split(out, start, count)
                    )
                    start += count
            except Exception as err:  # each waiting request gets the error
                results = [err] * len(taken)
            for (_, _, future), result in zip(taken, results, strict=True):
                if future.done():  # its client went away
                    continue
                if isinstance(result, Exception):
                    future.set_exception(result)
                else:
                    future.set_result(result)


def _default_key(backend):
    """The signature KServe v2 calls: `serving_default`, else the first."""
    signatures = backend.signatures
    if api.DEFAULT_SIGNATURE in signatures:
        return api.DEFAULT_SIGNATURE
    return next(iter(signatures))


def _batchers(backend, batching, executor):
    """`{signature: Batcher}` for the signatures whose requests merge
    (none with `max_batch_size` 1), each running on `executor`."""
    return {
        key: Batcher(
            lambda inputs, key=key: backend.run(key, inputs),
            batching["max_batch_size"],
            batching["batch_wait_ms"] / 1000,
            executor,
            signature.own_part,
        )
        for key, signature in backend.signatures.items()
        if signature.batched and batching["max_batch_size"] > 1
    }


def _kserve_model_class():
    """`ServedModel` subclasses `kserve.Model`, imported on first use."""
    import kserve
    from kserve import InferRequest
    from kserve.errors import InferenceError, InvalidInput

    class ServedModel(kserve.Model):
        """One model behind TensorFlow Serving's predict API."""

        def __init__(self, name, backend, limits, batching, version=1):
            super().__init__(name)
            self.backend, self.limits = backend, limits
            # The name clients use and the version: KServe registers the
            # latest version as `name`, the others as `name@version`.
            self.public_name, self.version = name.split("@")[0], version
            self.executor = concurrent.futures.ThreadPoolExecutor(1)
            self.batchers = _batchers(backend, batching, self.executor)
            self.ready = True

        def get_input_types(self):  # KServe v2 model metadata
            return oip.tensor_metadata(self._default().inputs)

        def get_output_types(self):
            return oip.tensor_metadata(self._default().outputs)

        def _default(self):
            return self.backend.signatures[_default_key(self.backend)]

        async def predict(self, payload, headers=None):
            if isinstance(payload, InferRequest):
                return await self._infer(payload)
            signatures = self.backend.signatures
            try:
                # KServe parses JSON bodies sent as JSON; TensorFlow Serving
                # parses any body (curl -d sends a form content type).
                payload = api.parse_json(payload)
                key, inputs, form = api.parse_predict(
                    payload, signatures, self.limits
                )
                wanted = api.output_filter(
                    payload.get("output_filter"), signatures[key]
                )
            except api.RequestError as err:
                raise InvalidInput(str(err)) from None
            out = api.filtered(await self.run(key, inputs), wanted)
            return api.format_predict(out, form)

        async def run(self, key, inputs):
            """The signature `key` on `inputs`, merged with other
            requests where it can be."""
            try:
                if key in self.batchers:
                    return await self.batchers[key].submit(inputs)
                loop = asyncio.get_running_loop()
                return await loop.run_in_executor(
                    self.executor, self.backend.run, key, inputs
                )
            except ModelError as err:
                raise InferenceError(_model_error(err)) from None

        async def _infer(self, request):
            """KServe v2's infer (REST, binary extension, gRPC) on the
            default signature."""
            key = _default_key(self.backend)
            wanted = [o.name for o in request.request_outputs or ()]
            try:
                tensors = [
                    (t.name, t.datatype, t.as_numpy()) for t in request.inputs
                ]
                signature = self.backend.signatures[key]
                inputs = oip.parse_infer(tensors, signature, self.limits)
                out = oip.infer_outputs(
                    await self.run(key, inputs), wanted or None
                )
            except (ValueError, TypeError) as err:  # RequestError included
                raise InvalidInput(str(err)) from None
            return _v2_response(request, self.name, out)

    return ServedModel


def _v2_response(request, model_name, outputs):
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


def _model_error(err):
    from keras_attn_cli.models import op_error_line

    return f"The model failed to run: {op_error_line(str(err))}"


def serve(
    artifacts,
    host,
    port,
    allow_unsafe,
    limits,
    batching,
    log=print,
    access=None,
    accelerator="cpu",
    log_level="info",
):
    """Load `artifacts` (`[(name, {version: path})]`, or `(name, path)`
    for version 1) and serve them until SIGTERM or SIGINT, which finish
    the requests in flight and return 0. `access`: `access.ACCESS`'s
    keys (a bearer token, the routes turned on, the gRPC port).
    `accelerator`: where LiteRT runs a `.tflite` (`"cpu"`, `"gpu"`,
    `"npu"`). `log_level`: one of `LOG_LEVELS`."""
    if log_level not in LOG_LEVELS:
        raise ValueError(
            f"Expected log_level to be one of {LOG_LEVELS}. Received: "
            f"log_level={log_level!r}"
        )
    names = [name for name, _ in artifacts]
    if len(set(names)) != len(names):
        raise ValueError(
            f"Two models would be served under one name. Received: {names}"
        )
    access = {**access_rule.ACCESS, **(access or {})}
    # Ports first: a busy one is refused before minutes of loading, and
    # before anything says "serving".
    sock = _listen(host, port, "--port")
    if access.get("grpc_port", 0):
        _listen(host, access["grpc_port"], "--grpc-port").close()
    try:
        models = _load_models(
            artifacts, limits, batching, log, allow_unsafe, accelerator
        )
    except BaseException:
        sock.close()
        raise
    return _run_server(models, host, sock, limits, log, access, log_level)


def _load_models(artifacts, limits, batching, log, allow_unsafe, accelerator):
    """`{registered name: ServedModel}` of `artifacts` (see `serve`)."""
    ServedModel = _kserve_model_class()
    models = {}
    for name, versions in artifacts:
        if isinstance(versions, str):
            versions = {1: versions}
        latest = max(versions)
        for version, path in sorted(versions.items()):
            key = name if version == latest else f"{name}@{version}"
            start = time.perf_counter()
            backend = load_backend(path, allow_unsafe, accelerator)
            models[key] = ServedModel(key, backend, limits, batching, version)
            took = time.perf_counter() - start
            log(f"loaded {name} version {version} from {path} in {took:.1f} s")
    return models


def _grpc_services():
    from keras_attn_cli import grpc_api

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


def _client_error_handlers(app):
    """KServe logs each client error as an ERROR with its traceback; these
    answer the same status and body and log one WARNING line: the method,
    the path, the status and the message."""
    from fastapi.responses import JSONResponse
    from kserve.errors import InvalidInput, ModelNotFound, ModelNotReady

    def handler(status):
        async def answer(request, exc):
            route = f"{request.method} {request.url.path}"
            log_refusal(status, route, exc)
            return JSONResponse({"error": str(exc)}, status_code=status)

        return answer

    for kind, status in (
        (InvalidInput, 400),
        (ModelNotFound, 404),
        (ModelNotReady, 503),
    ):
        app.add_exception_handler(kind, handler(status))


def _run_server(models, host, sock, limits, log, access, log_level="info"):
    import kserve
    import uvicorn
    from kserve.model_server import app
    from kserve.protocol.rest.server import RESTServer

    port = sock.getsockname()[1]
    server = kserve.ModelServer(
        http_port=port, enable_grpc=False, enable_latency_logging=False
    )
    for model in models.values():
        server.register_model(model)
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
    grpc_port = access.get("grpc_port", 0)
    stopping = []
    # uvicorn finishes the requests in flight on SIGTERM/SIGINT, then
    # raises the signal again: these handlers make that a clean exit.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, frame: stopping.append(number))

    async def run():
        rpc = None
        if grpc_port:  # built in the loop it runs on
            from keras_attn_cli import grpc_api

            rpc, bound = grpc_api.build_server(
                models, server.dataplane, host, grpc_port, access
            )
            if not bound:
                raise PortInUse("--grpc-port", host, grpc_port)
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
            rest.create_application()
            _client_error_handlers(app)  # after KServe's, to replace them
            _set_log_level(log_level)
            await uvicorn.Server(rest.config).serve(sockets=[sock])
        finally:
            sock.close()
            if rpc is not None:
                await rpc.stop(grace=30)

    asyncio.run(run())
    log("stopped")
    return 0
