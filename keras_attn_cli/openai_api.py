"""OpenAI's API for the served generative models, under `/openai/v1` as
KServe places it: `GET /models`, `POST /completions`, `POST
/chat/completions`, answered whole or, with `"stream": true`, as
server-sent events of OpenAI's chunk objects ending in `data: [DONE]`.

The rules are pure functions over JSON values (each tested on its own);
`add_openai_routes` puts them on the server's app over the same
`ServedModel.run` that TensorFlow Serving's and KServe's routes use, so
a translation asked for here is merged with the others into one call.

A served model is generative when it has a `translate` signature with a
text `translation` output (the translators) or a `generate` signature
with a text `completion` output (a decoder-only model's folder,
`keras_attn.models.TextGenerator`). Its deterministic search answers
`temperature` 0 or absent: the translator's beam, the same answer as
`keras-attn translate`; a decoder-only model's greedy search, as
LiteRT-LM runs its bundle. A model that can stream (its artifact's
`stream`) streams its pieces as its tokens are decided, and stops
decoding when the client hangs up; the others stream their whole answer
word by word. A token is a word here (the text split at white space):
`max_tokens` cuts the answer after that many words (`finish_reason`
`"length"`), `stop` at the first stop string (`"stop"`), and `usage`
counts words.
"""

import asyncio
import json
import threading
import time
import uuid

from keras_attn_cli import tf_serving_api as api
from keras_attn_cli.limits import check_text

PREFIX = "/openai/v1"
# The signatures a generative model answers with, and their text output.
GENERATIVE = {"translate": "translation", "generate": "completion"}
MAX_STOPS = 4  # OpenAI's limit on `stop` strings


class OpenAIError(ValueError):
    """A request OpenAI's API refuses: its status, message and the
    parameter at fault (OpenAI's error body, `error_body`)."""

    def __init__(self, message, param=None, status=400, code=None):
        super().__init__(message)
        self.param, self.status, self.code = param, status, code


def error_body(err):
    """OpenAI's error object for `err` (an `OpenAIError`)."""
    kind = "invalid_request_error" if err.status < 500 else "server_error"
    return {
        "error": {
            "message": str(err),
            "type": kind,
            "param": err.param,
            "code": err.code,
        }
    }


def generative_signature(signatures):
    """`(signature, output)` a model with these signatures answers
    OpenAI's routes with, or `None` when it is not generative."""
    for key, output in GENERATIVE.items():
        signature = signatures.get(key)
        if signature is not None and (
            signature.outputs.get(output, (None,))[0] == "string"
        ):
            return key, output
    return None


def is_generative(signatures):
    """Whether a model with these signatures answers OpenAI's routes."""
    return generative_signature(signatures) is not None


def _check_type(body, key, kinds, what):
    value = body.get(key)
    if value is not None and (
        isinstance(value, bool)
        and bool not in kinds
        or not isinstance(value, kinds)
    ):
        raise OpenAIError(
            f"Expected {key} to be {what}. Received: {key}={value!r}", key
        )
    return value


def _prompt(body, chat):
    """The text to translate: `prompt` (one string), or the last message
    of `messages`, which must be the user's."""
    if not chat:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise OpenAIError(
                "Expected prompt to be a string (or a list of one). "
                f"Received: prompt={str(prompt)[:80]!r}",
                "prompt",
            )
        return prompt
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAIError(
            "Expected messages to be a non-empty list. Received: "
            f"messages={str(messages)[:80]!r}",
            "messages",
        )
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        raise OpenAIError(
            "Expected the last message to be the user's: a translator "
            "translates it. Received: a last message with role "
            f"{last.get('role') if isinstance(last, dict) else None!r}",
            "messages",
        )
    content = last.get("content")
    if isinstance(content, list):  # content parts: the text ones, joined
        content = " ".join(
            p.get("text", "")
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    if not isinstance(content, str):
        raise OpenAIError(
            "Expected the last message's content to be text. Received: "
            f"{str(content)[:80]!r}",
            "messages",
        )
    return content


def parse_request(body, generative, chat=False):
    """The settings of a completions (`chat=False`) or chat completions
    request: `{"model", "prompt", "max_tokens", "stop", "stream",
    "include_usage"}`, or an `OpenAIError`. `generative`: the names of
    the models that answer."""
    if not isinstance(body, dict):
        raise OpenAIError("Expected a JSON object as the request body.")
    model = body.get("model")
    if model not in generative:
        raise OpenAIError(
            f"The model {model!r} does not exist or is not generative; "
            f"served: {sorted(generative)}",
            "model",
            status=404,
            code="model_not_found",
        )
    prompt = _prompt(body, chat)
    if not prompt.strip() or not any(c.isalnum() for c in prompt):
        raise OpenAIError(
            "Expected a text with at least one letter or digit to "
            f"translate. Received: {prompt[:80]!r}",
            "messages" if chat else "prompt",
        )
    limit = (
        "max_completion_tokens"
        if "max_completion_tokens" in body
        else "max_tokens"
    )
    max_tokens = _check_type(body, limit, (int,), "a positive integer")
    if max_tokens is not None and max_tokens < 1:
        raise OpenAIError(
            f"Expected {limit} to be a positive integer. Received: "
            f"{limit}={max_tokens}",
            limit,
        )
    temperature = _check_type(body, "temperature", (int, float), "a number")
    if temperature not in (None, 0):
        raise OpenAIError(
            "This model answers with its own deterministic search "
            "(temperature 0 or absent); it has no sampling. Received: "
            f"temperature={temperature}",
            "temperature",
        )
    _check_type(body, "seed", (int,), "an integer")
    n = _check_type(body, "n", (int,), "an integer")
    if n not in (None, 1):
        raise OpenAIError(f"Only n=1 is served. Received: n={n}", "n")
    stop = body.get("stop")
    stop = [stop] if isinstance(stop, str) else stop
    if stop is not None and (
        not isinstance(stop, list)
        or not all(isinstance(s, str) and s for s in stop)
        or len(stop) > MAX_STOPS
    ):
        raise OpenAIError(
            f"Expected stop to be a string or a list of at most {MAX_STOPS} "
            f"non-empty strings. Received: stop={str(stop)[:80]!r}",
            "stop",
        )
    stream = _check_type(body, "stream", (bool,), "true or false") or False
    options = _check_type(body, "stream_options", (dict,), "an object") or {}
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stop": stop or [],
        "stream": stream,
        "include_usage": bool(options.get("include_usage")),
    }


def finished(text, max_tokens=None, stop=()):
    """`(text, finish_reason)`: `text` cut at the first of `stop`
    (`"stop"`), then after `max_tokens` words (`"length"`)."""
    cuts = [text.find(s) for s in stop if s in text]
    if cuts:
        text = text[: min(cuts)].rstrip()
    words = text.split()
    if max_tokens is not None and len(words) > max_tokens:
        return " ".join(words[:max_tokens]), "length"
    return text, "stop"


def usage(prompt, text):
    """OpenAI's `usage`, counting words."""
    asked, answered = len(prompt.split()), len(text.split())
    return {
        "prompt_tokens": asked,
        "completion_tokens": answered,
        "total_tokens": asked + answered,
    }


def _head(settings, chat, chunk=False):
    kind = "chatcmpl" if chat else "cmpl"
    obj = "chat.completion" if chat else "text_completion"
    return {
        "id": f"{kind}-{uuid.uuid4().hex}",
        "object": obj + (".chunk" if chunk and chat else ""),
        "created": int(time.time()),
        "model": settings["model"],
    }


def response(settings, text, reason, chat=False):
    """The whole answer: a `text_completion` or a `chat.completion`."""
    if chat:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": reason,
        }
    else:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": reason,
        }
    return {
        **_head(settings, chat),
        "choices": [choice],
        "usage": usage(settings["prompt"], text),
    }


def chunks(settings, text, reason, chat=False):
    """The answer as server-sent events: one chunk a word (a chat's first
    chunk gives the role), a last chunk with `finish_reason`, a usage
    chunk if asked for (`stream_options.include_usage`), `[DONE]`."""
    head = _head(settings, chat, chunk=True)

    def event(delta, finish=None, extra=None):
        if chat:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
        else:
            choice = {
                "index": 0,
                "text": delta.get("content", ""),
                "logprobs": None,
                "finish_reason": finish,
            }
        body = {**head, "choices": [choice], **(extra or {})}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    if chat:
        yield event({"role": "assistant", "content": ""})
    for i, word in enumerate(text.split()):
        yield event({"content": word if i == 0 else " " + word})
    yield event({}, reason)
    if settings["include_usage"]:
        body = {**head, "choices": [], "usage": usage(settings["prompt"], text)}
        yield f"data: {json.dumps(body, ensure_ascii=False)}\n\n"
    yield "data: [DONE]\n\n"


def held_back(text, stop):
    """How many characters at the end of `text` could begin a stop
    string: a stream holds them until the next piece says."""
    return max(
        (n for s in stop for n in range(1, len(s)) if text.endswith(s[:n])),
        default=0,
    )


def stream_events(settings, pieces, chat=False):
    """Server-sent events of a streamed answer, from `pieces` (an async
    iterator of text as it is decoded): each piece as a chunk as soon as
    no stop string can begin in it, cut at a stop string or after
    `max_tokens` words, then the final chunk, the usage chunk if asked
    for, and `[DONE]`. Async: the caller's `pieces` is closed when the
    stream ends early."""
    head = _head(settings, chat, chunk=True)

    def event(delta, finish=None, extra=None):
        if chat:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
        else:
            choice = {
                "index": 0,
                "text": delta.get("content", ""),
                "logprobs": None,
                "finish_reason": finish,
            }
        body = {**head, "choices": [choice], **(extra or {})}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    async def events():
        if chat:
            yield event({"role": "assistant", "content": ""})
        text, sent, reason = "", 0, "stop"
        stops, limit = settings["stop"], settings["max_tokens"]
        async for piece in pieces:
            text += piece
            cut, reason = finished(text, limit, stops)
            if cut != text:  # a stop string, or past max_tokens
                text = cut
                break
            # Held back: what could begin a stop string, and trailing
            # spaces (a cut answer ends without them).
            ready = len(text[: len(text) - held_back(text, stops)].rstrip())
            if ready > sent:
                yield event({"content": text[sent:ready]})
                sent = ready
        else:
            text, reason = finished(text, limit, stops)
        if len(text) > sent:
            yield event({"content": text[sent:]})
        yield event({}, reason)
        if settings["include_usage"]:
            use = usage(settings["prompt"], text)
            body = {**head, "choices": [], "usage": use}
            yield f"data: {json.dumps(body, ensure_ascii=False)}\n\n"
        yield "data: [DONE]\n\n"

    return events()


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


def model_list(names, created):
    """`GET /models`: the generative models served."""
    return {
        "object": "list",
        "data": [
            {
                "id": n,
                "object": "model",
                "created": created,
                "owned_by": "keras_attn",
            }
            for n in sorted(names)
        ],
    }


def add_openai_routes(app, models):
    """OpenAI's routes on `app` (FastAPI) over `models` (`{registered
    name: ServedModel}`), for those that are generative."""
    from fastapi import Request
    from fastapi.responses import JSONResponse, StreamingResponse

    generative = {
        name: model
        for name, model in models.items()
        if "@" not in name and is_generative(model.backend.signatures)
    }
    streams = {
        name
        for name, model in generative.items()
        if callable(getattr(model.backend, "stream", None))
    }
    created = int(time.time())

    def refused(err):
        return JSONResponse(error_body(err), status_code=err.status)

    async def answer(request, chat):
        try:
            try:
                body = json.loads(await request.body() or b"null")
            except (ValueError, RecursionError):
                raise OpenAIError(
                    "Malformed JSON in the request body."
                ) from None
            settings = parse_request(body, generative, chat)
            model = generative[settings["model"]]
            check_text(
                settings["prompt"].encode("utf-8"), "the prompt", model.limits
            )
            if settings["stream"] and settings["model"] in streams:
                return StreamingResponse(
                    stream_events(
                        settings, _pieces(model, settings["prompt"]), chat
                    ),
                    media_type="text/event-stream",
                )
            text = await _complete(model, settings["prompt"])
        except OpenAIError as err:
            return refused(err)
        except api.RequestError as err:
            return refused(
                OpenAIError(str(err), "messages" if chat else "prompt")
            )
        text, reason = finished(text, settings["max_tokens"], settings["stop"])
        if settings["stream"]:
            return StreamingResponse(
                chunks(settings, text, reason, chat),
                media_type="text/event-stream",
            )
        return response(settings, text, reason, chat)

    async def completions(request: Request):
        return await answer(request, chat=False)

    async def chat_completions(request: Request):
        return await answer(request, chat=True)

    async def list_models():
        return model_list(generative, created)

    app.add_api_route(f"{PREFIX}/models", list_models, methods=["GET"])
    app.add_api_route(f"{PREFIX}/completions", completions, methods=["POST"])
    app.add_api_route(
        f"{PREFIX}/chat/completions", chat_completions, methods=["POST"]
    )
    return sorted(generative)


async def _complete(model, prompt):
    """The model's answer to `prompt` (a translation, a completion),
    through the server's merged calls; a model failure is a 500 in
    OpenAI's form."""
    import numpy as np
    from kserve.errors import InferenceError

    key, output = generative_signature(model.backend.signatures)
    try:
        out = await model.run(
            key, {"text": np.array([prompt.encode("utf-8")], object)}
        )
    except InferenceError as err:
        raise OpenAIError(str(err), status=500) from None
    value = np.asarray(out[output]).reshape(-1)[0]
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
