"""The serving plane: what every protocol asks of the served models, in
the protocol-free form, decided and run in one place.

A request reads adapter → plane → model. The adapters (`tf_serving_api`
and `http_routes` for TensorFlow Serving's REST API, `open_inference`
for KServe v2, `grpc_api` for both gRPC APIs, `openai_api` and
`openai_routes` for OpenAI's) parse a request into the calls below and
format what they return; they decide nothing and run nothing.

- **Which model**: `find` (a name, and optionally a version number or a
  label; `keras_attn_cli.serving.registry` keeps the table).
- **Which signature**: `signature_key`, one rule for every protocol.
- **How many examples**: `example_count`, within `--max-instances`.
- **Running a signature**: `predict(model, key, inputs)`: the texts
  checked against the model's window, the call merged with others
  (`served.Batcher`) on the model's executor, a text the model read in
  part refused.
- **Generating**: `generate(model, prompt, n, sampling)`: the window
  checked once, sampling checked against what the model can do, a place
  taken (`--max-streams`, `--max-queue`), and `n` answers decoded as the
  model's capabilities say (`keras_attn_runtime.capabilities`).
- **What an error answers**: `ERRORS`, one table from an error's kind to
  its HTTP status, gRPC code and OpenAI code, read by the REST handlers
  (`keras_attn_cli.serving.serve`), the gRPC adapter and interceptor
  (`keras_attn_cli.serving.grpc_api`) and OpenAI's routes; `UNAUTHORIZED`,
  the one message of a call without the token.
"""

import asyncio
import dataclasses
import threading
import time

import numpy as np

from keras_attn_cli.serving import registry
from keras_attn_cli.serving.admission import TooBusy
from keras_attn_cli.serving.limits import RequestError, check_count
from keras_attn_runtime.opener import ModelError, PromptTooLong
from keras_attn_runtime.signature import DEFAULT_SIGNATURE, check_read_whole

NotServed = registry.NotServed

# The message of a call that lacks the bearer token (REST: a 401 with
# `WWW-Authenticate: Bearer`; gRPC: UNAUTHENTICATED).
UNAUTHORIZED = (
    "Unauthorized: this server needs 'Authorization: Bearer <token>' "
    "(REST header, or gRPC metadata 'authorization'; --auth-token-file)"
)


class ModelFailed(RuntimeError):
    """The model failed on a request's inputs (a 500; the message says
    where, in one line)."""


class NoSampling(RequestError):
    """A sampled answer asked of a model that answers only with its own
    deterministic search (a 400 naming `temperature`)."""


@dataclasses.dataclass(frozen=True)
class Answer:
    """What one kind of error answers: its HTTP status, gRPC code name,
    and OpenAI error `code` (`None`: none)."""

    kind: type
    status: int
    grpc: str
    openai: str = None


def _errors():
    from kserve.errors import InvalidInput, ModelNotFound, ModelNotReady

    return (
        Answer(
            PromptTooLong, 400, "INVALID_ARGUMENT", "context_length_exceeded"
        ),
        Answer(RequestError, 400, "INVALID_ARGUMENT"),
        Answer(InvalidInput, 400, "INVALID_ARGUMENT"),
        Answer(NotServed, 404, "NOT_FOUND", "model_not_found"),
        Answer(ModelNotFound, 404, "NOT_FOUND", "model_not_found"),
        Answer(TooBusy, 429, "RESOURCE_EXHAUSTED", "too_many_requests"),
        Answer(NotImplementedError, 501, "UNIMPLEMENTED"),
        Answer(ModelNotReady, 503, "UNAVAILABLE"),
        Answer(ModelFailed, 500, "INTERNAL"),
    )


ERRORS = None  # the table, made on first use (KServe's classes are in it)


def error_table():
    """`ERRORS`: every kind of error the plane (and KServe under it)
    raises, the most specific first, with what it answers on each
    protocol."""
    global ERRORS
    if ERRORS is None:
        ERRORS = _errors()
    return ERRORS


def answer_for(err):
    """The `Answer` row of `err`, or `None` for an error that is not in
    the table (a failure of ours: a 500)."""
    for row in error_table():
        if isinstance(err, row.kind):
            return row
    return None


def message_of(err):
    """The one-line message an error answers with (KServe's errors keep
    theirs in `reason`)."""
    return getattr(err, "reason", None) or str(err)


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


# --- Running a signature ---------------------------------------------


async def predict(model, key, inputs, checked=False):
    """Signature `key` of `model` (a `ServedModel`) on `inputs`: each
    text checked against the model's window first (unless `checked`),
    then merged with other requests where the signature allows it, on
    the model's executor. Raises the plane's errors: `PromptTooLong` (a
    text past the window, or one the model read only in part),
    `ModelFailed`."""
    if not checked:
        check_prompts(model.can, inputs)
    try:
        if key in model.batchers:
            out = await model.batchers[key].submit(inputs)
        else:
            loop = asyncio.get_running_loop()
            out = await loop.run_in_executor(
                model.executor, model.backend.run, key, inputs
            )
    except ModelError as err:
        raise ModelFailed(model_error(err)) from None
    check_truncated(out, inputs)
    return out


def model_error(err):
    from keras_attn_cli.tf_errors import op_error_line

    return f"The model failed to run: {op_error_line(str(err))}"


def check_prompts(can, inputs):
    """A `PromptTooLong` for a text of `inputs` longer than the window
    of a model with capabilities `can`: checked before the text is
    merged with others, whose calls it must not fail."""
    if can.window is None or "text" not in inputs:
        return
    for text in np.asarray(inputs["text"]).reshape(-1):
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        can.window(str(text))


def check_truncated(outputs, inputs=None):
    """A `PromptTooLong` for a request one of whose texts the model read
    only the start of (`keras_attn_runtime.signature.check_read_whole`,
    the verdict the command line gives too), rather than an answer in
    part."""
    texts = None if inputs is None else inputs.get("text")
    if texts is not None:
        texts = [
            t.decode("utf-8", "replace") if isinstance(t, bytes) else t
            for t in np.asarray(texts).reshape(-1)
        ]
    check_read_whole(outputs, texts)


# --- Generating --------------------------------------------------------


GENERATIVE = {"translate": "translation", "generate": "completion"}


def generative_signature(signatures):
    """`(signature, output)` a model with these signatures generates
    with (a `translate` signature with a text `translation` output, or a
    `generate` one with a text `completion`), or `None`."""
    for key, output in GENERATIVE.items():
        signature = signatures.get(key)
        if signature is not None and (
            signature.outputs.get(output, (None,))[0] == "string"
        ):
            return key, output
    return None


async def generate(model, prompt, n=1, sampling=None):
    """`Answers` to `prompt` from `model`: `n` of them (each seeded
    `seed + index` when `sampling` is given), decoded as the model's
    capabilities say once a place is free. Raises `PromptTooLong` past
    the window, `NoSampling` for `sampling` a model cannot do, `TooBusy`
    past the line, `ModelFailed`."""
    can = model.can
    if can.window is not None:
        can.window(prompt)
    if sampling is not None and not can.samples:
        raise NoSampling(
            f"{model.public_name} answers with its own deterministic "
            "search (temperature 0 or absent); it has no sampling. "
            f"Received: temperature={sampling['temperature']}"
        )
    if not can.streams:
        return Answers(whole=[await _whole(model, prompt)] * n)
    arrived = time.monotonic()
    await model.admission.enter()
    pieces = []
    for index in range(n):
        own = None
        if sampling is not None:  # a seed a choice, each reproducible
            seed = sampling["seed"]
            own = {**sampling, "seed": None if seed is None else seed + index}
        stream = _pieces(model, prompt, own)
        pieces.append(model.admission.timed(stream, arrived))
    return Answers(pieces, model.admission)


async def _whole(model, prompt):
    """The answer of a model that does not stream, through the merged
    calls every protocol shares (its window already checked)."""
    key, output = generative_signature(model.backend.signatures)
    text = np.array([prompt.encode("utf-8")], object)
    out = await predict(model, key, {"text": text}, checked=True)
    value = np.asarray(out[output]).reshape(-1)[0]
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class Answers:
    """A request's answers. From a model that streams: `pieces` (an
    async iterator an answer, read one after the other), `joined()` (the
    whole texts), `closing(events)` (a stream of events that frees the
    place and stops the decoding when it ends or its client hangs up).
    From one that does not: `whole`, the texts."""

    def __init__(self, pieces=(), admission=None, whole=None):
        self.pieces, self.admission, self.whole = pieces, admission, whole

    async def close(self):
        try:
            for pieces in self.pieces:
                await pieces.aclose()
        finally:
            if self.admission is not None:
                self.admission.leave()
                self.admission = None

    async def joined(self):
        try:
            texts = []
            for pieces in self.pieces:
                texts.append("".join([piece async for piece in pieces]))
        finally:
            await self.close()
        return texts

    def closing(self, events):
        async def closed():
            try:
                async for event in events:
                    yield event
            finally:
                await self.close()

        return closed()


async def _pieces(model, prompt, sampling=None):
    """The pieces of `model`'s streamed answer to `prompt`, decoded as
    its capabilities say (`keras_attn_runtime.capabilities.DECODING`):
    in turns on the model's executor, on a thread of its own that waits
    on the model's shared loops, or handed over from the model's own
    threads; closing this iterator (a client that hung up) stops the
    decoding between two tokens."""
    loop = asyncio.get_running_loop()
    queue, stop, done = asyncio.Queue(), threading.Event(), object()
    generator, finished = model.backend, loop.create_future()
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

    decoding = model.can.decoding
    if decoding == "handover":
        generator.stream_into(
            prompt,
            lambda item: loop.call_soon_threadsafe(handed, item),
            stop,
            **extra,
        )
        worker = finished
    elif decoding == "loops":
        threading.Thread(target=produce, daemon=True).start()
        worker = finished
    else:
        worker = loop.run_in_executor(model.executor, produce)
    try:
        while (piece := await queue.get()) is not done:
            if isinstance(piece, Exception):  # the stream's reader says it
                raise piece
            yield piece
    finally:
        stop.set()
        await asyncio.shield(worker)
