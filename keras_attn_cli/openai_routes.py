"""OpenAI's routes on `keras-attn serve`'s app: the rules of
`keras_attn_cli.openai_api` over the served models (`ServedModel.run`,
merged with every other protocol's calls) and, for a model that streams,
its pieces as they are decoded, the decoding stopped when the client
hangs up."""

import asyncio
import json
import threading
import time

from keras_attn_cli import openai_api as rules
from keras_attn_cli import tf_serving_api as api
from keras_attn_cli.limits import check_text


def add_openai_routes(app, models):
    """OpenAI's routes on `app` (FastAPI) over `models` (`{registered
    name: ServedModel}`), for those that are generative."""
    from fastapi import Request
    from fastapi.responses import StreamingResponse

    generative = {
        name: model
        for name, model in models.items()
        if "@" not in name and rules.is_generative(model.backend.signatures)
    }
    streams = {
        name
        for name, model in generative.items()
        if callable(getattr(model.backend, "stream", None))
    }
    created = int(time.time())
    active = dict.fromkeys(streams, 0)  # streams decoding, a model

    async def answer(request, chat):
        try:
            try:
                body = json.loads(await request.body() or b"null")
            except (ValueError, RecursionError):
                raise rules.OpenAIError(
                    "Malformed JSON in the request body."
                ) from None
            settings = rules.parse_request(body, generative, chat)
            model = generative[settings["model"]]
            check_text(
                settings["prompt"].encode("utf-8"), "the prompt", model.limits
            )
            if settings["stream"] and settings["model"] in streams:
                events = _token_stream(model, settings, chat, active)
                return StreamingResponse(events, media_type="text/event-stream")
            text = await _complete(model, settings["prompt"])
        except rules.OpenAIError as err:
            return _refused(err)
        except api.RequestError as err:
            return _refused(
                rules.OpenAIError(str(err), "messages" if chat else "prompt")
            )
        text, reason = rules.finished(
            text, settings["max_tokens"], settings["stop"]
        )
        if settings["stream"]:
            return StreamingResponse(
                rules.chunks(settings, text, reason, chat),
                media_type="text/event-stream",
            )
        return rules.response(settings, text, reason, chat)

    async def completions(request: Request):
        return await answer(request, chat=False)

    async def chat_completions(request: Request):
        return await answer(request, chat=True)

    async def list_models():
        return rules.model_list(generative, created)

    app.add_api_route(f"{rules.PREFIX}/models", list_models, methods=["GET"])
    app.add_api_route(
        f"{rules.PREFIX}/completions", completions, methods=["POST"]
    )
    app.add_api_route(
        f"{rules.PREFIX}/chat/completions", chat_completions, methods=["POST"]
    )
    return sorted(generative)


def _refused(err):
    """OpenAI's error answer for `err`; a 429 says when to retry."""
    from fastapi.responses import JSONResponse

    headers = {"Retry-After": "1"} if err.status == 429 else None
    return JSONResponse(
        rules.error_body(err), status_code=err.status, headers=headers
    )


def _token_stream(model, settings, chat, active):
    """The events of `model`'s streamed answer, counted in `active`
    (`{model name: streams decoding}`) until they end (the client read
    them all, or hung up); one stream past `max_streams` is a 429."""
    name = settings["model"]
    if active[name] >= model.limits["max_streams"]:
        raise rules.OpenAIError(
            f"{name} is decoding {active[name]} streams, its limit "
            "(--max-streams); retry after a second.",
            status=429,
            code="too_many_streams",
        )
    pieces = _pieces(model, settings["prompt"])
    events = rules.stream_events(settings, pieces, chat)
    active[name] += 1

    async def counted():
        try:
            async for event in events:
                yield event
        finally:
            active[name] -= 1

    return counted()


async def _complete(model, prompt):
    """The model's answer to `prompt` (a translation, a completion),
    through the server's merged calls; a model failure is a 500 in
    OpenAI's form."""
    import numpy as np
    from kserve.errors import InferenceError

    key, output = rules.generative_signature(model.backend.signatures)
    try:
        out = await model.run(
            key, {"text": np.array([prompt.encode("utf-8")], object)}
        )
    except InferenceError as err:
        raise rules.OpenAIError(str(err), status=500) from None
    value = np.asarray(out[output]).reshape(-1)[0]
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


async def _pieces(model, prompt):
    """The pieces of `model`'s streamed answer to `prompt`, decoded on
    the model's executor (one model call at a time, as every route's);
    closing this iterator (a client that hung up) stops the decoding
    between two tokens."""
    loop = asyncio.get_running_loop()
    queue, stop, done = asyncio.Queue(), threading.Event(), object()

    def produce():
        try:
            for piece in model.backend.stream(prompt, stop):
                loop.call_soon_threadsafe(queue.put_nowait, piece)
        except Exception as err:  # a model failure ends the stream
            loop.call_soon_threadsafe(queue.put_nowait, err)
        loop.call_soon_threadsafe(queue.put_nowait, done)

    worker = loop.run_in_executor(model.executor, produce)
    try:
        while (piece := await queue.get()) is not done:
            if isinstance(piece, Exception):
                raise piece
            yield piece
    finally:
        stop.set()
        await asyncio.shield(worker)
