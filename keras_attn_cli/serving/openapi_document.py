"""The OpenAPI document of `keras-attn serve` (`/openapi.json`, with
`--enable-docs`), true to the routes: only the routes that answer
(KServe's `:explain` needs an explainer this server never has; its
repository routes answer only with `--enable-model-management`), and a
request body and answers for every route that takes one, with each
protocol's error form. FastAPI writes the rest from the routes
themselves; this module only corrects it, so a route added later is
documented as FastAPI sees it."""

from keras_attn_cli.serving import openai_api
from keras_attn_runtime import sampling

# Each protocol's error body: TensorFlow Serving's and KServe's
# `{"error": message}`, OpenAI's error object.
PLAIN_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string"}},
}
OPENAI_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}

PREDICT_BODY = {
    "type": "object",
    "description": "TensorFlow Serving's predict request: `instances` "
    "(row form) or `inputs` (columnar form), texts as strings.",
    "properties": {
        "signature_name": {"type": "string"},
        "instances": {"type": "array", "items": {}},
        "inputs": {},
        "output_filter": {"type": "array", "items": {"type": "string"}},
    },
}
PREDICT_ANSWER = {
    "type": "object",
    "properties": {
        "predictions": {"type": "array", "items": {}},
        "outputs": {},
    },
}

_SAMPLING = {
    "max_tokens": {"type": "integer", "minimum": 1},
    "max_completion_tokens": {"type": "integer", "minimum": 1},
    "stop": {
        "oneOf": [
            {"type": "string", "minLength": 1},
            {
                "type": "array",
                "maxItems": openai_api.MAX_STOPS,
                "items": {"type": "string", "minLength": 1},
            },
        ]
    },
    "stream": {"type": "boolean"},
    "stream_options": {
        "type": "object",
        "properties": {"include_usage": {"type": "boolean"}},
    },
    # The sampling table's ranges (`keras_attn_runtime.sampling`), as
    # OpenAI's requests carry them: a temperature of 0 asks for the
    # model's own search, a top_k of 0 or -1 (vLLM's) for every token.
    "temperature": sampling.schema(
        "temperature",
        exclusiveMinimum=None,
        minimum=0,
        maximum=openai_api.MAX_TEMPERATURE,
    ),
    "top_p": sampling.schema("top_p"),
    "top_k": sampling.schema("top_k", minimum=-1),
    "seed": sampling.schema("seed"),
    "n": {"type": "integer", "minimum": 1, "maximum": openai_api.MAX_CHOICES},
}
COMPLETION_BODY = {
    "type": "object",
    "required": ["model", "prompt"],
    "properties": {
        "model": {"type": "string"},
        "prompt": {
            "oneOf": [
                {"type": "string"},
                {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 1,
                    "items": {"type": "string"},
                },
            ]
        },
        **_SAMPLING,
    },
}
CHAT_BODY = {
    "type": "object",
    "required": ["model", "messages"],
    "properties": {
        "model": {"type": "string"},
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["role", "content"],
                "properties": {
                    "role": {"type": "string"},
                    "content": {
                        "oneOf": [
                            {"type": "string"},
                            {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["type"],
                                    "properties": {
                                        "type": {"type": "string"},
                                        "text": {"type": "string"},
                                    },
                                },
                            },
                        ]
                    },
                },
            },
        },
        **_SAMPLING,
    },
}
COMPLETION_ANSWER = {
    "type": "object",
    "required": ["id", "object", "choices"],
    "properties": {
        "id": {"type": "string"},
        "object": {"type": "string"},
        "created": {"type": "integer"},
        "model": {"type": "string"},
        "choices": {"type": "array", "items": {"type": "object"}},
        "usage": {"type": "object"},
    },
}


def _json(schema, description):
    return {
        "description": description,
        "content": {"application/json": {"schema": schema}},
    }


def _answers(ok, error, statuses):
    answers = {"200": _json(ok, "the answer")}
    for status, why in statuses:
        answers[str(status)] = _json(error, why)
    return answers


CLIENT_ERRORS = (
    (400, "a request this model cannot serve, named"),
    (404, "an unknown model, version or route"),
    (413, "a body over --max-body-bytes"),
)
# `(path, body, answer, error form, extra statuses)` of the routes that
# take a body FastAPI cannot see (each reads the raw request).
BODIES = {
    ("/v1/models/{model_name}:predict", "post"): (
        PREDICT_BODY,
        PREDICT_ANSWER,
        PLAIN_ERROR,
        (),
    ),
    ("/openai/v1/completions", "post"): (
        COMPLETION_BODY,
        COMPLETION_ANSWER,
        OPENAI_ERROR,
        ((429, "more streams than --max-streams; retry after a second"),),
    ),
    ("/openai/v1/chat/completions", "post"): (
        CHAT_BODY,
        COMPLETION_ANSWER,
        OPENAI_ERROR,
        ((429, "more streams than --max-streams; retry after a second"),),
    ),
}
# Routes KServe adds that this server never answers.
NEVER_SERVED = ("/v1/models/{model_name}:explain",)
MANAGEMENT_PREFIX = "/v2/repository/"


def corrected(document, model_management=False, model_names=()):
    """`document` (FastAPI's) true to the routes: those never served left
    out (and the repository routes unless `model_management`), a body and
    answers for each route in `BODIES`, and a path's `model_name` one of
    `model_names` where they are given (another is a 404)."""
    paths = document.setdefault("paths", {})
    for operations in paths.values():
        for operation in operations.values():
            for parameter in operation.get("parameters", ()):
                if parameter.get("name") == "model_name" and model_names:
                    parameter["schema"] = {
                        "type": "string",
                        "enum": sorted(model_names),
                    }
    for path in list(paths):
        if path in NEVER_SERVED or (
            path.startswith(MANAGEMENT_PREFIX) and not model_management
        ):
            del paths[path]
    for (path, method), (body, ok, error, extra) in BODIES.items():
        operation = paths.get(path, {}).get(method)
        if operation is None:
            continue
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": body}},
        }
        operation["responses"] = _answers(ok, error, CLIENT_ERRORS + extra)
    return document


def install(app, model_management=False, model_names=tuple):
    """`app.openapi` (FastAPI's `/openapi.json`) answering `corrected`'s
    document, made again when `model_names()` (the names served now)
    changes, and the `/docs` and `/redoc` pages reading it."""
    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
    from fastapi.openapi.utils import get_openapi

    made_for = []

    def openapi():
        names = tuple(sorted(model_names()))
        if app.openapi_schema is None or made_for != [names]:
            document = get_openapi(
                title=app.title, version=app.version, routes=app.routes
            )
            app.openapi_schema = corrected(document, model_management, names)
            made_for[:] = [names]
        return app.openapi_schema

    app.openapi = openapi
    paths = {route.path for route in app.routes if hasattr(route, "path")}

    async def docs():
        return get_swagger_ui_html(
            openapi_url="/openapi.json", title=f"{app.title} - docs"
        )

    async def redoc():
        return get_redoc_html(
            openapi_url="/openapi.json", title=f"{app.title} - ReDoc"
        )

    for path, page in (("/docs", docs), ("/redoc", redoc)):
        if path not in paths:
            app.add_api_route(path, page, include_in_schema=False)
