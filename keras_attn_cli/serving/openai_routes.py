"""OpenAI's routes on `keras-attn serve`'s app: each request parsed by
`keras_attn_cli.serving.openai_api`'s rules, answered by the plane
(`plane.generate`: the window, sampling, a place, the decoding as the
model can do it) and formatted back; a plane error answered in OpenAI's
form from the plane's table (`plane.ERRORS`). A model that streams
answers from its pieces as they are decoded, streamed or joined, the
decoding stopped when the client hangs up; another answers whole
through the calls every protocol shares, and, asked to stream, a word
a chunk."""

import json
import time

from keras_attn_cli.serving import openai_api as rules
from keras_attn_cli.serving import openai_events as sse
from keras_attn_cli.serving import plane
from keras_attn_cli.serving.limits import LOGGER, check_text, log_refusal


def add_openai_routes(app, models):
    """OpenAI's routes on `app` (FastAPI) over `models` (`{registered
    name: ServedModel}`), for those that are generative."""
    from fastapi import Request

    def generative():  # read at each request: versions come and go
        return {
            name: model
            for name, model in models.items()
            if "@" not in name and rules.is_generative(model.backend.signatures)
        }

    created = int(time.time())

    def find(name):  # the plane's lookup, over the generative models
        return plane.find(generative(), name)

    async def answer(request, chat):
        param = "messages" if chat else "prompt"
        try:
            body = await _read_json(request)
            settings = rules.parse_request(body, find, chat)
            model = settings["served"]
            settings["counts"] = rules.token_counts(model.can)
            check_text(
                settings["prompt"].encode("utf-8"), "the prompt", model.limits
            )
            answers = await plane.generate(
                model, settings["prompt"], settings["n"], settings["sampling"]
            )
        except rules.OpenAIError as err:
            return _refused(err, request)
        except Exception as err:
            return _refused(_openai_error(err, param), request)
        if answers.whole is not None:
            return _whole(settings, answers.whole[0], chat)
        return await _decoded(request, settings, answers, chat)

    async def completions(request: Request):
        return await answer(request, chat=False)

    async def chat_completions(request: Request):
        return await answer(request, chat=True)

    async def list_models():
        return rules.model_list(generative(), created)

    app.add_api_route(f"{rules.PREFIX}/models", list_models, methods=["GET"])
    app.add_api_route(
        f"{rules.PREFIX}/completions", completions, methods=["POST"]
    )
    app.add_api_route(
        f"{rules.PREFIX}/chat/completions", chat_completions, methods=["POST"]
    )
    return sorted(generative())


def _failure_logger(request):
    """`log(err)`: one ERROR line for a stream of `request` that failed
    after it began (its client gets an error event)."""
    route = f"{request.method} {request.url.path}"

    def log(err):
        LOGGER.error("stream %s: %s", route, " ".join(str(err).split()))

    return log


def _openai_error(err, param):
    """`err`, a plane error, as OpenAI's error, by the plane's table
    (`plane.answer_for`); one that is not in it is raised on (a 500 of
    ours, logged with its traceback by the server)."""
    row = plane.answer_for(err)
    if row is None:
        raise err
    if isinstance(err, plane.NoSampling):
        param = "temperature"
    elif row.status == 404:
        param = "model"
    elif row.status >= 429:
        param = None
    return rules.OpenAIError(
        plane.message_of(err), param, status=row.status, code=row.openai
    )


def _refused(err, request):
    """OpenAI's error answer for `err`, logged in one line; a 429 says
    when to retry."""
    from fastapi.responses import JSONResponse

    log_refusal(err.status, f"{request.method} {request.url.path}", err)
    headers = {"Retry-After": "1"} if err.status == 429 else None
    return JSONResponse(
        rules.error_body(err), status_code=err.status, headers=headers
    )


async def _read_json(request):
    try:
        return json.loads(await request.body() or b"null")
    except (ValueError, RecursionError):
        raise rules.OpenAIError("Malformed JSON in the request body.") from None


async def _decoded(request, settings, answers, chat):
    """The answer of a model that streams: its pieces as server-sent
    events, or joined."""
    from fastapi.responses import StreamingResponse

    if settings["stream"]:
        failed = _failure_logger(request)
        events = sse.stream_events(
            settings, answers.pieces, chat, on_error=failed
        )
        return StreamingResponse(
            answers.closing(events), media_type="text/event-stream"
        )
    limit, stops = settings["max_tokens"], settings["stop"]
    texts = await answers.joined()
    return rules.response_choices(
        settings, [rules.finished(t, limit, stops) for t in texts], chat
    )


def _whole(settings, text, chat):
    """The answer of a model that does not stream, cut as asked; as
    server-sent events a word a chunk when `stream` is asked for."""
    from fastapi.responses import StreamingResponse

    text, reason = rules.finished(
        text, settings["max_tokens"], settings["stop"]
    )
    if settings["stream"]:
        return StreamingResponse(
            sse.chunks(settings, text, reason, chat),
            media_type="text/event-stream",
        )
    return rules.response(settings, text, reason, chat)
