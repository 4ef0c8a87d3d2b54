"""OpenAI's API for the served generative models, under `/openai/v1` as
KServe places it: `GET /models`, `POST /completions`, `POST
/chat/completions`, answered whole or, with `"stream": true`, as
server-sent events of OpenAI's chunk objects ending in `data: [DONE]`.

The rules are pure functions over JSON values (each tested on its own);
`keras_attn_cli.serving.openai_routes.add_openai_routes` puts them on the
server's app over the plane (`plane.generate`), which runs a model that
does not stream through the same merged calls as TensorFlow Serving's
and KServe's routes. The streamed answers' server-sent events
are `keras_attn_cli.serving.openai_events`'.

A served model is generative when it has a `translate` signature with a
text `translation` output (the translators) or a `generate` signature
with a text `completion` output (a decoder-only model's folder,
`keras_attn.models.TextGenerator`). Its deterministic search answers
`temperature` 0 or absent: the translator's beam, the same answer as
`keras-attn translate`; a decoder-only model's greedy search, as
LiteRT-LM runs its bundle. A model that can stream (its artifact's
`stream`) streams its pieces as its tokens are decided, and stops
decoding when the client hangs up; the others stream their whole answer
word by word. `usage` counts tokens by the model's tokenizer where the
served artifact has one (a decoder-only model's folder: the prompt's
tokens as fed, template and start token included, and the answer's),
else words (the text split at white space); `max_tokens` cuts the answer
after that many words (`finish_reason` `"length"`), `stop` at the first
stop string (`"stop"`).
"""

import time
import uuid

from keras_attn_runtime import sampling

PREFIX = "/openai/v1"
MAX_STOPS = 4  # OpenAI's limit on `stop` strings
MAX_CHOICES = 4  # the most answers (`n`) one request asks for
MAX_TEMPERATURE = 2  # OpenAI's bound


class OpenAIError(ValueError):
    """A request OpenAI's API refuses: its status, message and the
    parameter at fault (OpenAI's error body, `error_body`)."""

    def __init__(self, message, param=None, status=400, code=None):
        super().__init__(message)
        self.param, self.status, self.code = param, status, code


def error_body(err):
    """OpenAI's error object for `err` (an `OpenAIError`)."""
    kind = {429: "rate_limit_error"}.get(
        err.status,
        "invalid_request_error" if err.status < 500 else "server_error",
    )
    return {
        "error": {
            "message": str(err),
            "type": kind,
            "param": err.param,
            "code": err.code,
        }
    }


def is_generative(signatures):
    """Whether a model with these signatures answers OpenAI's routes
    (`plane.generative_signature`)."""
    from keras_attn_cli.serving.plane import generative_signature

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
    """The text to translate: `prompt` (one string), or the one message
    of `messages`, the user's. The served models (translators) have no
    template for a conversation: a system message or an earlier turn is
    refused naming it, never dropped."""
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
    for index, message in enumerate(messages[:-1]):
        role = message.get("role") if isinstance(message, dict) else None
        raise OpenAIError(
            "Expected one message, the user's: this model translates one "
            "text and renders no conversation (no system message, no "
            f"earlier turns). Received: messages[{index}] with role "
            f"{role!r} before the last; send the text alone",
            "messages",
        )
    if not isinstance(last, dict) or last.get("role") != "user":
        raise OpenAIError(
            "Expected the last message to be the user's: a translator "
            "translates it. Received: a last message with role "
            f"{last.get('role') if isinstance(last, dict) else None!r}",
            "messages",
        )
    content = last.get("content")
    if isinstance(content, list):  # content parts: the text ones, joined
        content = " ".join(_text_parts(content, len(messages) - 1))
    if not isinstance(content, str):
        raise OpenAIError(
            "Expected the last message's content to be text. Received: "
            f"{str(content)[:80]!r}",
            "messages",
        )
    return content


def _text_parts(parts, index):
    """The texts of a message's content parts (`messages[index]`): each
    part an object with a `type`; a `"text"` part's `text` a string.
    Parts of other types (images, audio) carry nothing a text model
    reads, and are left out."""
    texts = []
    for j, part in enumerate(parts):
        where = f"messages[{index}].content[{j}]"
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise OpenAIError(
                f"Expected {where} to be an object with a string type. "
                f"Received: {where}={_shown(part)}",
                "messages",
            )
        if part["type"] != "text":
            continue
        text = part.get("text")
        if not isinstance(text, str):
            raise OpenAIError(
                f"Expected {where}.text to be a string. Received: "
                f"{where}.text={_shown(text)}",
                "messages",
            )
        texts.append(text)
    return texts


def _shown(value):
    """`value` as an error message shows it: its repr, cut at 80
    characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_unicode(text, param):
    """An `OpenAIError` naming `param` for a text UTF-8 cannot encode (a
    lone surrogate such as `"\\udc80"`, which JSON's `\\u` escapes can
    carry)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise OpenAIError(
            f"Expected {param} to be valid Unicode text. Received: a lone "
            f"surrogate {text[err.start : err.end]!r} at character "
            f"{err.start}",
            param,
        ) from None


def parse_request(body, find, chat=False):
    """The settings of a completions (`chat=False`) or chat completions
    request: `{"model", "served", "prompt", "max_tokens", "stop",
    "stream", "include_usage"}`, or an `OpenAIError`. `find(name)`: the
    served model `name` names (the plane's lookup, `settings["served"]`),
    raising a `LookupError` that says what is served otherwise."""
    if not isinstance(body, dict):
        raise OpenAIError("Expected a JSON object as the request body.")
    model = body.get("model")
    if not isinstance(model, str):
        raise OpenAIError(
            f"Expected model to be a string. Received: model={_shown(model)}",
            "model",
        )
    try:
        served = find(model)
    except LookupError as err:
        raise OpenAIError(
            f"The model {model!r} does not exist or is not generative: "
            f"{err.args[0] if err.args else err}",
            "model",
            status=404,
            code="model_not_found",
        ) from None
    prompt = _prompt(body, chat)
    check_unicode(prompt, "messages" if chat else "prompt")
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
    sampling = _sampling(body)
    n = _check_type(body, "n", (int,), "an integer")
    if n is not None and not 1 <= n <= MAX_CHOICES:
        raise OpenAIError(
            f"Expected n to be from 1 to {MAX_CHOICES}. Received: n={n}", "n"
        )
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
    for text in stop or ():
        check_unicode(text, "stop")
    stream = _check_type(body, "stream", (bool,), "true or false") or False
    options = _check_type(body, "stream_options", (dict,), "an object") or {}
    return {
        "model": model,
        "served": served,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stop": stop or [],
        "stream": stream,
        "include_usage": bool(options.get("include_usage")),
        "sampling": sampling,
        "n": n or 1,
    }


def _sampling(body):
    """`None` (the model's own search: `temperature` 0 or absent), or
    `{"temperature", "top_k", "top_p", "seed"}` for a sampled answer;
    an `OpenAIError` naming a value out of its range. `top_k` (vLLM's and
    `litert-lm serve`'s field) of 0 or -1 keeps every token."""
    temperature = _check_type(body, "temperature", (int, float), "a number")
    if temperature is not None and not 0 <= temperature <= MAX_TEMPERATURE:
        raise OpenAIError(
            f"Expected temperature to be from 0 to {MAX_TEMPERATURE}. "
            f"Received: temperature={temperature}",
            "temperature",
        )
    top_k = _check_type(body, "top_k", (int,), "an integer")
    if top_k is not None and top_k < -1:
        raise OpenAIError(
            "Expected top_k to be a positive integer, or 0 or -1 for every "
            f"token. Received: top_k={top_k}",
            "top_k",
        )
    settings = {
        "top_k": top_k if top_k and top_k > 0 else None,  # vLLM's 0 and -1
        "top_p": body.get("top_p"),
        "seed": body.get("seed"),
    }
    for name in ("top_p", "seed"):  # the sampling table's ranges
        try:
            sampling.check(name, settings[name], allow_none=True)
        except ValueError as err:
            raise OpenAIError(str(err), name) from None
    if not temperature:
        return None
    if settings["top_p"] is None:
        settings["top_p"] = sampling.PARAMETERS["top_p"].default
    return {"temperature": temperature, **settings}


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


def _words(text):
    return len(text.split())


# What `usage` counts without a tokenizer: words, in the prompt and in
# the answers.
WORDS = (_words, _words)


def token_counts(can):
    """`(prompt, answer)`: functions counting a prompt's tokens (those
    fed, template and start token included) and an answer's by the
    model's tokenizer, where the served artifact's capabilities `can`
    have them (a decoder-only model's folder); else `WORDS`."""
    return can.counts or WORDS


def usage(prompt, text, counts=WORDS):
    """OpenAI's `usage` (`text`: the answer, or a list of the `n`
    answers), counted by `counts` (`token_counts`: the model's tokens,
    else words)."""
    texts = [text] if isinstance(text, str) else text
    count_prompt, count_answer = counts
    asked = count_prompt(prompt)
    answered = sum(count_answer(t) for t in texts)
    return {
        "prompt_tokens": asked,
        "completion_tokens": answered,
        "total_tokens": asked + answered,
    }


def head(settings, chat, chunk=False):
    """The fields every answer object (or chunk, with `chunk`) starts
    with: its id, kind, time and model."""
    kind = "chatcmpl" if chat else "cmpl"
    obj = "chat.completion" if chat else "text_completion"
    return {
        "id": f"{kind}-{uuid.uuid4().hex}",
        "object": obj + (".chunk" if chunk and chat else ""),
        "created": int(time.time()),
        "model": settings["model"],
    }


def response(settings, text, reason, chat=False):
    """The whole answer: a `text_completion` or a `chat.completion` (`n`
    copies of one deterministic answer; `response_choices` for answers
    that differ)."""
    return response_choices(
        settings, [(text, reason)] * settings.get("n", 1), chat
    )


def response_choices(settings, answers, chat=False):
    """The whole answer with a choice per `(text, finish_reason)` of
    `answers`."""
    choices = []
    for index, (text, reason) in enumerate(answers):
        if chat:
            message = {"role": "assistant", "content": text}
            choice = {"index": index, "message": message}
        else:
            choice = {"index": index, "text": text, "logprobs": None}
        choices.append({**choice, "finish_reason": reason})
    texts = [text for text, _ in answers]
    return {
        **head(settings, chat),
        "choices": choices,
        "usage": usage(
            settings["prompt"], texts, settings.get("counts", WORDS)
        ),
    }


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
