"""The server-sent events of OpenAI's streamed answers: OpenAI's chunk
objects (`chat.completion.chunk`, or `text_completion`), a choice at a
time, a last chunk with `finish_reason`, a usage chunk when
`stream_options.include_usage` asks for it, and `data: [DONE]`; a
failure after a stream began as an error event. Pure functions over the
settings `keras_attn_cli.serving.openai_api.parse_request` reads;
`openai_routes` sends them."""

import json

from keras_attn_cli.serving.openai_api import (
    WORDS,
    OpenAIError,
    error_body,
    finished,
    usage,
)
from keras_attn_cli.serving.openai_api import (
    head as answer_head,
)


def _event_maker(head, chat):
    """`event(delta, finish=None)`: one server-sent event of a stream's
    chunk objects under `head` (a chat's delta, or a completion's text)."""

    def event(delta, finish=None, index=0):
        if chat:
            choice = {"index": index, "delta": delta, "finish_reason": finish}
        else:
            choice = {
                "index": index,
                "text": delta.get("content", ""),
                "logprobs": None,
                "finish_reason": finish,
            }
        body = {**head, "choices": [choice]}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    return event


def _usage_event(head, settings, text):
    """The usage chunk of `stream_options.include_usage`."""
    counts = settings.get("counts", WORDS)
    body = {
        **head,
        "choices": [],
        "usage": usage(settings["prompt"], text, counts),
    }
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


def chunks(settings, text, reason, chat=False):
    """The answer as server-sent events: one chunk a word (a chat's first
    chunk gives the role), a last chunk with `finish_reason`, a usage
    chunk if asked for (`stream_options.include_usage`), `[DONE]`."""
    head = answer_head(settings, chat, chunk=True)
    event = _event_maker(head, chat)
    n = settings.get("n", 1)
    for index in range(n):
        if chat:
            yield event({"role": "assistant", "content": ""}, None, index)
        for i, word in enumerate(text.split()):
            yield event(
                {"content": word if i == 0 else " " + word}, None, index
            )
        yield event({}, reason, index)
    if settings["include_usage"]:
        yield _usage_event(head, settings, [text] * n)
    yield "data: [DONE]\n\n"


def held_back(text, stop):
    """How many characters at the end of `text` could begin a stop
    string: a stream holds them until the next piece says."""
    return max(
        (n for s in stop for n in range(1, len(s)) if text.endswith(s[:n])),
        default=0,
    )


def error_event(err):
    """The server-sent event of a stream that failed after it began:
    OpenAI's error object (a server error unless `err` is an
    `OpenAIError` saying otherwise)."""
    if not isinstance(err, OpenAIError):
        err = OpenAIError(
            f"The model failed while answering: {' '.join(str(err).split())}",
            status=500,
        )
    return f"data: {json.dumps(error_body(err), ensure_ascii=False)}\n\n"


def stream_events(settings, pieces, chat=False, on_error=lambda err: None):
    """Server-sent events of a streamed answer, from `pieces` (an async
    iterator of text as it is decoded, or a list of them, one a choice,
    read one after the other): each piece as a chunk as soon as no stop
    string can begin in it, cut at a stop string or after `max_tokens`
    words, then the choice's final chunk; after the last choice the
    usage chunk if asked for, and `[DONE]`. A failure after the stream
    began ends it with an error event (`error_event`, after
    `on_error(err)`) and `[DONE]`. Async: the caller's `pieces` is
    closed when the stream ends early."""
    head = answer_head(settings, chat, chunk=True)
    event = _event_maker(head, chat)
    choices = pieces if isinstance(pieces, list) else [pieces]

    async def events():
        texts = []
        for index, choice in enumerate(choices):
            if chat:
                yield event({"role": "assistant", "content": ""}, None, index)
            try:
                async for line in _choice_events(
                    settings, choice, event, index
                ):
                    if isinstance(line, tuple):  # the choice's whole text
                        texts.append(line[0])
                    else:
                        yield line
            except Exception as err:  # the model failed after it began
                on_error(err)
                yield error_event(err)
                yield "data: [DONE]\n\n"
                return
        if settings["include_usage"]:
            yield _usage_event(head, settings, texts)
        yield "data: [DONE]\n\n"

    return events()


async def _choice_events(settings, pieces, event, index):
    """One choice's chunks (`stream_events`), then `(its text,)`."""
    text, sent, reason = "", 0, "stop"
    stops, limit = settings["stop"], settings["max_tokens"]
    async for piece in pieces:
        text += piece
        cut, reason = finished(text, limit, stops)
        if cut != text:  # a stop string, or past max_tokens
            text = cut
            break
        # Held back: what could begin a stop string, and trailing spaces
        # (a cut answer ends without them).
        ready = len(text[: len(text) - held_back(text, stops)].rstrip())
        if ready > sent:
            yield event({"content": text[sent:ready]}, None, index)
            sent = ready
    else:
        text, reason = finished(text, limit, stops)
    if len(text) > sent:
        yield event({"content": text[sent:]}, None, index)
    yield event({}, reason, index)
    yield (text,)
