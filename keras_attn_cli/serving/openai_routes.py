"""OpenAI's routes on `keras-attn serve`'s app: the rules of
`keras_attn_cli.serving.openai_api` over the served models. A model that streams
(`ServedModel.generator` has `stream`: a decoder-only model's folder, a
translator whose LiteRT file has streaming signatures) answers from its
pieces as they are decoded, streamed or joined, the decoding stopped
when the client hangs up; a translator's streams share one decode loop
(iteration-level batching). Others answer through `ServedModel.run`,
merged with every other protocol's calls."""

import asyncio
import json
import threading
import time
import weakref

from keras_attn_cli.serving import openai_api as rules
from keras_attn_cli.serving import openai_events as sse
from keras_attn_cli.serving import plane
from keras_attn_cli.serving.admission import Admission, TooBusy
from keras_attn_cli.serving.limits import (
    LOGGER,
    RequestError,
    check_text,
    log_refusal,
    stream_limit,
)
from keras_attn_runtime.opener import PromptTooLong
from keras_attn_runtime.opener import streams as can_stream


def add_openai_routes(app, models):
    """OpenAI's routes on `app` (FastAPI) over `models` (`{registered
    name: ServedModel}`), for those that are generative."""
    from fastapi import Request

    def generative():  # read at each request: versions come and go
        return {
            name: model
            for name, model in models.items()
            if "@" not in name
            and rules.is_generative(model.generator.signatures)
        }

    created = int(time.time())
    # Each served model's admission, made on its first stream (a new
    # version has its own).
    admissions = weakref.WeakKeyDictionary()

    def admission_of(model):
        if model not in admissions:
            admissions[model] = Admission(
                model.public_name,
                stream_limit(model.limits, model.generator),
                model.limits["max_queue"],
            )
        return admissions[model]

    def find(name):  # the plane's lookup, over the generative models
        return plane.find(generative(), name)

    async def answer(request, chat):
        try:
            body = await _read_json(request)
            settings = rules.parse_request(body, find, chat)
            model = settings["served"]
            settings["counts"] = rules.token_counts(model.generator)
            check_text(
                settings["prompt"].encode("utf-8"), "the prompt", model.limits
            )
            _check_window(model.generator, settings["prompt"], chat)
            _check_sampling(model.generator, settings)
            if can_stream(model.generator):
                admission = admission_of(model)
                return await _decoded(request, model, settings, admission, chat)
            text = await _complete(model, settings["prompt"])
        except rules.OpenAIError as err:
            return _refused(err, request)
        except RequestError as err:
            return _refused(
                rules.OpenAIError(str(err), "messages" if chat else "prompt"),
                request,
            )
        return _whole(settings, text, chat)

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


def _check_window(generator, prompt, chat):
    """OpenAI's `context_length_exceeded` for a prompt longer than the
    model reads (its `check_prompt`), before a stream begins."""
    check = getattr(generator, "check_prompt", None)
    try:
        if check is not None:
            check(prompt)
    except PromptTooLong as err:
        raise rules.OpenAIError(
            str(err),
            "messages" if chat else "prompt",
            code="context_length_exceeded",
        ) from None


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


async def _decoded(request, model, settings, admission, chat):
    """The answer of a model that streams: its pieces as server-sent
    events, or joined, once a place is free (`_admitted`)."""
    from fastapi.responses import StreamingResponse

    choices = await _admitted(model, settings, admission)
    if settings["stream"]:
        failed = _failure_logger(request)
        events = sse.stream_events(
            settings, choices.pieces, chat, on_error=failed
        )
        return StreamingResponse(
            choices.closing(events), media_type="text/event-stream"
        )
    return rules.response_choices(settings, await choices.joined(), chat)


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


def _check_sampling(generator, settings):
    """A 400 naming `temperature` for a sampled answer asked of a model
    that answers only with its own search (a translator's beam)."""
    if settings["sampling"] is not None and not (
        can_stream(generator) and generator.sampling
    ):
        raise rules.OpenAIError(
            f"{settings['model']} answers with its own deterministic search "
            "(temperature 0 or absent); it has no sampling. Received: "
            f"temperature={settings['sampling']['temperature']}",
            "temperature",
        )


class _Choices:
    """An admitted request's `n` answers: `pieces` (an async iterator a
    choice, timed, read one after the other), `joined()` (the whole
    texts), `closing(events)` (a stream that frees the place and stops
    the decoding when it ends or its client hangs up)."""

    def __init__(self, pieces, settings, admission):
        self.pieces, self.settings = pieces, settings
        self.admission = admission

    async def close(self):
        try:
            for pieces in self.pieces:
                await pieces.aclose()
        finally:
            self.admission.leave()

    async def joined(self):
        try:
            texts = []
            for pieces in self.pieces:
                texts.append("".join([piece async for piece in pieces]))
        finally:
            await self.close()
        limit, stops = self.settings["max_tokens"], self.settings["stop"]
        return [rules.finished(text, limit, stops) for text in texts]

    def closing(self, events):
        async def closed():
            try:
                async for event in events:
                    yield event
            finally:
                await self.close()

        return closed()


async def _admitted(model, settings, admission):
    """`_Choices` of `model`'s answer once a place is free; past the
    line (`--max-queue`), a 429."""
    arrived = time.monotonic()
    try:
        await admission.enter()
    except TooBusy as err:
        raise rules.OpenAIError(
            str(err), status=429, code="too_many_requests"
        ) from None
    sampling = settings["sampling"]
    pieces = []
    for index in range(settings["n"]):
        own = None
        if sampling is not None:  # a seed a choice, each reproducible
            seed = sampling["seed"]
            own = {**sampling, "seed": None if seed is None else seed + index}
        stream = _pieces(model, settings["prompt"], own)
        pieces.append(admission.timed(stream, arrived))
    return _Choices(pieces, settings, admission)


async def _complete(model, prompt):
    """The model's answer to `prompt` (a translation, a completion),
    through the server's merged calls; a model failure is a 500 in
    OpenAI's form."""
    import numpy as np
    from kserve.errors import InferenceError, InvalidInput

    key, output = rules.generative_signature(model.backend.signatures)
    try:
        out = await model.run(
            key, {"text": np.array([prompt.encode("utf-8")], object)}
        )
    except InvalidInput as err:
        raise rules.OpenAIError(str(err), "prompt") from None
    except InferenceError as err:
        raise rules.OpenAIError(str(err), status=500) from None
    value = np.asarray(out[output]).reshape(-1)[0]
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


async def _pieces(model, prompt, sampling=None):
    """The pieces of `model`'s streamed answer to `prompt`, decoded on
    the model's executor (one model call at a time, as every route's),
    or, for a generator that decodes every caller in one loop
    (`concurrent_streams`), on a thread of its own that waits for it,
    or, for one that hands its pieces over from its own threads
    (`stream_into`), with no thread of ours; closing this iterator (a
    client that hung up) stops the decoding between two tokens."""
    loop = asyncio.get_running_loop()
    queue, stop, done = asyncio.Queue(), threading.Event(), object()
    generator, finished = model.generator, loop.create_future()
    extra = {} if sampling is None else {"sampling": sampling}

    def produce():
        try:
            for piece in generator.stream(prompt, stop, **extra):
                loop.call_soon_threadsafe(queue.put_nowait, piece)
        except Exception as err:  # a model failure ends the stream
            loop.call_soon_threadsafe(queue.put_nowait, err)
        loop.call_soon_threadsafe(queue.put_nowait, done)
        loop.call_soon_threadsafe(finished.set_result, None)

    def handed(item):  # in the loop: a piece, a failure, or the end
        if item is None or isinstance(item, Exception):
            finished.set_result(None)
        queue.put_nowait(done if item is None else item)

    if callable(getattr(generator, "stream_into", None)):
        generator.stream_into(
            prompt,
            lambda item: loop.call_soon_threadsafe(handed, item),
            stop,
            **extra,
        )
        worker = finished
    elif generator.concurrent_streams:
        threading.Thread(target=produce, daemon=True).start()
        worker = finished
    else:
        worker = loop.run_in_executor(model.executor, produce)
    try:
        while (piece := await queue.get()) is not done:
            if isinstance(piece, Exception):
                raise piece
            yield piece
    finally:
        stop.set()
        await asyncio.shield(worker)
