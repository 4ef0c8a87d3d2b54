"""The serving plane: what every protocol asks of the served models, in
the protocol-free form, decided in one place.

- **Which model**: `find` (a name, and optionally a version number or a
  label; `keras_attn_cli.serving.registry` keeps the table).
- **Which signature**: `signature_key`, one rule for every protocol: the
  one the request names, else `serving_default`, else the model's first;
  an unknown name is one `RequestError` message.
- **How many examples**: `example_count`, every input as many, within
  `--max-instances`, for the TensorFlow Serving and KServe requests.
- **What an error answers**: `ERRORS`, one table from an error's kind
  to its HTTP status and gRPC code, read by the REST handlers
  (`keras_attn_cli.serving.serve`), the gRPC interceptor
  (`keras_attn_cli.serving.grpc_api`) and OpenAI's routes; `UNAUTHORIZED`,
  the one message of a call without the token.
- **Limits** (`keras_attn_cli.serving.limits`), **access**
  (`keras_attn_cli.serving.access`) and **running** (`ServedModel.run`:
  batching, the model's window) stay with their owners; the adapters
  reach them through here or through the `ServedModel`.

The adapters (`tf_serving_api` and `http_routes` for TensorFlow
Serving's REST API, `open_inference` for KServe v2, `grpc_api` for both
gRPC APIs, `openai_api` and `openai_routes` for OpenAI's) translate a
request into these calls and the answer back; they decide nothing.
"""

from keras_attn_cli.serving import registry
from keras_attn_cli.serving.limits import RequestError, check_count
from keras_attn_runtime.signature import DEFAULT_SIGNATURE

NotServed = registry.NotServed

# The message of a call that lacks the bearer token (REST: a 401 with
# `WWW-Authenticate: Bearer`; gRPC: UNAUTHENTICATED).
UNAUTHORIZED = (
    "Unauthorized: this server needs 'Authorization: Bearer <token>' "
    "(REST header, or gRPC metadata 'authorization'; --auth-token-file)"
)


def find(models, name, version=None, label=None):
    """The served model (`{registered name: ServedModel}`'s value) that
    `name` at `version` (a number; `None`: the latest) or `label` names;
    a `NotServed` naming what is served otherwise."""
    if not isinstance(models, registry.Registry):
        models = registry.Registry(models)
    return models.find(name, version=version, label=label)


def signature_key(signatures, asked=None):
    """The signature a request runs: `asked` when it names one, else
    `serving_default`, else the first; a `RequestError` for a name the
    model does not have."""
    if asked is None:
        if DEFAULT_SIGNATURE in signatures:
            return DEFAULT_SIGNATURE
        return next(iter(signatures))
    if not isinstance(asked, str) or asked not in signatures:
        raise RequestError(
            f"Unknown signature_name {asked!r}; this model has "
            f"{sorted(signatures)}"
        )
    return asked


def example_count(inputs, limits):
    """How many examples a request's `inputs` (`{name: one value a
    row}`) hold: every input as many (else a `RequestError` with each
    input's count), at most `max_instances`."""
    counts = {len(values) for values in inputs.values()}
    if len(counts) != 1:
        raise RequestError(
            "Expected every input to hold as many examples. Received: "
            f"{ {k: len(v) for k, v in inputs.items()} }"
        )
    (count,) = counts
    check_count(count, limits)
    return count


def error_kinds():
    """`[(exception class, HTTP status, gRPC code name)]`, the most
    specific first: what each kind of error answers on every protocol.
    KServe's classes are imported on first use."""
    from kserve.errors import InvalidInput, ModelNotFound, ModelNotReady

    return [
        (RequestError, 400, "INVALID_ARGUMENT"),
        (InvalidInput, 400, "INVALID_ARGUMENT"),
        (NotServed, 404, "NOT_FOUND"),
        (ModelNotFound, 404, "NOT_FOUND"),
        (ModelNotReady, 503, "UNAVAILABLE"),
        (NotImplementedError, 501, "UNIMPLEMENTED"),
    ]


def answer_for(err):
    """`(HTTP status, gRPC code name)` of `err`, or `None` for an error
    that is not a client's (a failure of ours: a 500)."""
    for kind, status, code in error_kinds():
        if isinstance(err, kind):
            return status, code
    return None
