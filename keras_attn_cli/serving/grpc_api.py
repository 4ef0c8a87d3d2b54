"""`keras-attn serve`'s gRPC port: TensorFlow Serving's gRPC API and
KServe's v2 gRPC inference on one server.

TensorFlow Serving's `PredictionService` (`Predict`, `GetModelMetadata`)
and `ModelService` (`GetModelStatus`) are the servicers that
`tensorflow-serving-api` generates, implemented over the same models as
the REST routes; KServe's `GRPCInferenceService` is KServe's own
servicer. An interceptor keeps strangers out: the routes that change what
is served are off unless turned on, and with a token every call but the
health checks needs `authorization: Bearer TOKEN` in its metadata.
"""

import grpc

from keras_attn_cli.serving import access, plane, tensor_protos
from keras_attn_cli.serving import open_inference as oip
from keras_attn_cli.serving import tf_serving_api as api
from keras_attn_cli.serving.limits import LOGGER, log_refusal

PREDICTION = "/tensorflow.serving.PredictionService/"
MODEL_SERVICE = "/tensorflow.serving.ModelService/"

# gRPC methods that answer without a token (liveness and readiness), and
# those that change what is served.
HEALTH_METHODS = (
    "/inference.GRPCInferenceService/ServerLive",
    "/inference.GRPCInferenceService/ServerReady",
    "/inference.GRPCInferenceService/ModelReady",
)
MANAGEMENT_METHODS = (
    "/inference.GRPCInferenceService/RepositoryModelLoad",
    "/inference.GRPCInferenceService/RepositoryModelUnload",
    "/tensorflow.serving.ModelService/HandleReloadConfigRequest",
)


async def refuse(context, code, message, method):
    """End the call with `code` (a client's error) and `message`, logged
    in one WARNING line (`log_refusal`); a server's own failure
    (`INTERNAL`) is one ERROR line. Never a traceback."""
    if code == grpc.StatusCode.INTERNAL:
        LOGGER.error("%s %s: %s", code.name, method, " ".join(message.split()))
    else:
        log_refusal(code.name, method, message)
    await context.abort(code, message)


async def find(models, spec, context, method):
    """The served model `spec` names (its version, or the latest), or the
    call aborted with NOT_FOUND (unknown model, version or label)."""
    try:
        return plane.find(
            models,
            spec.name,
            version=spec.version.value if spec.HasField("version") else None,
            label=spec.version_label or None,
        )
    except plane.NotServed as err:
        await refuse(context, grpc.StatusCode.NOT_FOUND, str(err), method)


def _answer_spec(target, model, signature):
    target.name = model.public_name
    target.version.value = model.version
    target.signature_name = signature


async def predict(models, request, context):
    """`PredictionService.Predict`: the named signature on the request's
    tensors, checked as KServe v2's inputs are, run by the plane; its
    errors answered with their codes (`plane.ERRORS`)."""
    from tensorflow_serving.apis import predict_pb2

    method = PREDICTION + "Predict"
    model = await find(models, request.model_spec, context, method)
    signatures = model.backend.signatures
    try:
        asked = request.model_spec.signature_name or None
        key = plane.signature_key(signatures, asked)
        tensors = []
        for name, proto in request.inputs.items():
            array = tensor_protos.to_numpy(proto)
            tensors.append((name, oip.datatype(array.dtype), array))
        inputs = oip.parse_infer(tensors, signatures[key], model.limits)
        wanted = api.output_filter(list(request.output_filter), signatures[key])
        out = api.filtered(await plane.predict(model, key, inputs), wanted)
    except Exception as err:  # a plane error, or the model's own failure
        row = plane.answer_for(err)
        code = getattr(grpc.StatusCode, row.grpc if row else "INTERNAL")
        await refuse(context, code, plane.message_of(err), method)
    response = predict_pb2.PredictResponse()
    _answer_spec(response.model_spec, model, key)
    for name, array in out.items():
        response.outputs[name].CopyFrom(tensor_protos.from_numpy(array))
    return response


async def model_metadata(models, request, context):
    """`PredictionService.GetModelMetadata`: the `signature_def` map."""
    from tensorflow_serving.apis import get_model_metadata_pb2

    method = PREDICTION + "GetModelMetadata"
    model = await find(models, request.model_spec, context, method)
    wanted = list(request.metadata_field)
    if wanted != ["signature_def"]:
        await refuse(
            context,
            grpc.StatusCode.INVALID_ARGUMENT,
            f"Expected metadata_field ['signature_def']. Received: {wanted}",
            method,
        )
    response = get_model_metadata_pb2.GetModelMetadataResponse()
    _answer_spec(response.model_spec, model, "")
    response.metadata["signature_def"].Pack(
        tensor_protos.signature_def_map(model.backend.signatures)
    )
    return response


async def model_status(models, request, context):
    """`ModelService.GetModelStatus`: what the REST status route answers
    (`tf_serving_api.status`: the served versions, or the one asked for,
    and those that failed to load), as its proto."""
    from tensorflow_serving.apis import get_model_status_pb2

    spec = request.model_spec
    failed = models.failed.get(spec.name)
    if (
        failed
        and not models.versions(spec.name)
        and not spec.HasField("version")
    ):
        answer = api.status((), failed)
    else:
        method = MODEL_SERVICE + "GetModelStatus"
        model = await find(models, spec, context, method)
        if spec.HasField("version"):
            answer = api.status([model.version])
        else:
            answer = api.status(models.versions(spec.name), failed)
    response = get_model_status_pb2.GetModelStatusResponse()
    states = get_model_status_pb2.ModelVersionStatus.State
    for entry in answer["model_version_status"]:
        status = response.model_version_status.add()
        status.version = int(entry["version"])
        status.state = states.Value(entry["state"])
        if entry["state"] != "AVAILABLE":
            status.status.error_code = 2  # UNKNOWN, TensorFlow's code
            status.status.error_message = entry["status"]["error_message"]
    return response


def _servicers():
    """TensorFlow Serving's two servicer classes (the generated bases,
    imported on first use), each method one of the functions above."""
    from tensorflow_serving.apis import (
        model_service_pb2_grpc,
        prediction_service_pb2_grpc,
    )

    class Prediction(prediction_service_pb2_grpc.PredictionServiceServicer):
        def __init__(self, models):
            self.models = models

        async def Predict(self, request, context):
            return await predict(self.models, request, context)

        async def GetModelMetadata(self, request, context):
            return await model_metadata(self.models, request, context)

        async def Classify(self, request, context):
            await refuse(
                context,
                grpc.StatusCode.UNIMPLEMENTED,
                "Classify takes tf.Example inputs; these models take text: "
                "use Predict",
                PREDICTION + "Classify",
            )

        Regress = MultiInference = Classify

    class Status(model_service_pb2_grpc.ModelServiceServicer):
        def __init__(self, models):
            self.models = models

        async def GetModelStatus(self, request, context):
            return await model_status(self.models, request, context)

    return Prediction, Status


def method_kind(method):
    """The kind of call (`keras_attn_cli.serving.access`) a gRPC method is."""
    if method in HEALTH_METHODS:
        return access.HEALTH
    if method in MANAGEMENT_METHODS:
        return access.MANAGEMENT
    return access.OTHER


class Gate(grpc.aio.ServerInterceptor):
    """`keras_attn_cli.serving.access`'s rule on gRPC: a method that is off is
    UNIMPLEMENTED naming the flag that turns it on; a call without the
    token UNAUTHENTICATED."""

    def __init__(self, access):
        self.access = access

    async def intercept_service(self, continuation, details):
        method = details.method
        metadata = dict(details.invocation_metadata or ())
        refused = access.refusal(
            method_kind(method),
            str(metadata.get("authorization", "")),
            self.access,
        )
        if refused is None:
            return _refusing_malformed(await continuation(details), method)
        if refused.off:
            code = grpc.StatusCode.UNIMPLEMENTED
            message = f"{method} is off (turned on by {refused.off})"
        else:
            code = grpc.StatusCode.UNAUTHENTICATED
            message = plane.UNAUTHORIZED

        async def refused(request, context):
            await refuse(context, code, message, method)

        return grpc.unary_unary_rpc_method_handler(refused)


# How to install `tensorflow-serving-api` beside `tensorflow-cpu`: its
# wheel asks for `tensorflow`, a second TensorFlow; its modules need only
# TensorFlow's protos, which `tensorflow-cpu` has.
INSTALL_TF_SERVING_API = (
    "pip install --no-deps 'tensorflow-serving-api>=2.21,<2.22'"
)


def has_tensorflow_serving_api():
    import importlib.util

    return importlib.util.find_spec("tensorflow_serving") is not None


class _Malformed:
    """A request message that did not parse, and why."""

    def __init__(self, reason):
        self.reason = reason


def _refusing_malformed(handler, method):
    """`handler` (a unary call's), answering a request message that does
    not parse with INVALID_ARGUMENT naming the problem (gRPC's own answer
    is UNKNOWN)."""
    if handler is None or handler.unary_unary is None:
        return handler
    parse, behavior = handler.request_deserializer, handler.unary_unary

    def safe_parse(data):
        try:
            return parse(data) if parse else data
        except Exception as err:  # DecodeError and kin: the client's
            return _Malformed(f"{type(err).__name__}: {err}")

    async def guarded(request, context):
        if isinstance(request, _Malformed):
            await refuse(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Malformed request message ({request.reason})",
                method,
            )
        answer = behavior(request, context)
        return await answer if hasattr(answer, "__await__") else answer

    return grpc.unary_unary_rpc_method_handler(
        guarded,
        request_deserializer=safe_parse,
        response_serializer=handler.response_serializer,
    )


def _client_errors(kserve_interceptor):
    """KServe's interceptor, with a client's error answered with the
    plane's code for it (`plane.answer_for`: bad input, unknown or unready
    model, a route never served) in one WARNING line instead of an ERROR
    with its traceback; a call this module already refused goes on as
    refused."""

    class ClientErrors(kserve_interceptor):
        async def handle_exception(self, ex, request, context, method_name):
            if isinstance(ex, grpc.aio.AbortError):  # refused, and logged
                raise ex
            answer = plane.answer_for(ex)
            if answer is None:
                return await super().handle_exception(
                    ex, request, context, method_name
                )
            code = getattr(grpc.StatusCode, answer.grpc)
            await refuse(context, code, plane.message_of(ex), method_name)

    return ClientErrors()


def build_server(models, dataplane, host, port, access, limits):
    """A `grpc.aio` server on `host:port` with TensorFlow Serving's and
    KServe's v2 services over `models` (`{name: ServedModel}`), and the
    port it bound (0: it could not). `limits` as on HTTP: a request
    message over `max_body_bytes` is refused with RESOURCE_EXHAUSTED
    before it is parsed, and a connection that has not finished its
    handshake after `header_timeout` seconds is closed."""
    from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc

    # KServe's errors (unknown model, bad input) become their status
    # codes, as on KServe's own gRPC server.
    from kserve.protocol.grpc.interceptors import ExceptionToStatusInterceptor
    from kserve.protocol.grpc.servicer import InferenceServicer

    server = grpc.aio.server(
        interceptors=(
            Gate(access),
            _client_errors(ExceptionToStatusInterceptor),
        ),
        # gRPC's default SO_REUSEPORT lets a second server listen on a
        # port in use, and clients' calls then reach either one.
        options=(
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", limits["max_body_bytes"]),
            (
                "grpc.server_handshake_timeout_ms",
                int(limits["header_timeout"] * 1000),
            ),
        ),
    )
    if has_tensorflow_serving_api():
        from tensorflow_serving.apis import (
            model_service_pb2_grpc,
            prediction_service_pb2_grpc,
        )

        Prediction, Status = _servicers()
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
            Prediction(models), server
        )
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(
            Status(models), server
        )
    grpc_predict_v2_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
        InferenceServicer(dataplane, None), server
    )
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError:  # grpcio raises where older releases returned 0
        bound = 0
    return server, bound
