"""OpenAI's routes on an app of their own, over a stand-in model whose
stream waits for the test: streams past `max_streams` get a 429 with
`Retry-After`, a stream that ends frees its place, and a client that
hangs up stops the decoding. Then over a translator's LiteRT file with
streaming signatures, through the `openai` client: side-by-side streams
decoded in one loop join to the unstreamed answers, which are the file's
alone."""

import asyncio
import concurrent.futures
import json
import threading

import pytest

from keras_attn_cli.serving.limits import LIMITS
from keras_attn_cli.serving.served import ServedModelState
from keras_attn_runtime.signature import Signature

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")


class Gated:
    """A generative backend whose stream gives a piece each time the test
    opens its gate, and notes whether it was told to stop."""

    signatures = {
        "generate": Signature(
            {"text": ("string", [None])}, {"completion": ("string", [None])}
        )
    }

    # `keras_attn_runtime.opener.StreamingArtifact`, as a model's own.
    concurrent_streams = False
    stream_capacity = None
    sampling = False

    def __init__(self):
        self.gate = threading.Semaphore(0)
        self.stopped = threading.Event()

    def check_prompt(self, text):
        pass

    def stream(self, text, stop):
        for word in ("Je", " suis", " là."):
            while not self.gate.acquire(timeout=0.05):
                if stop.is_set():
                    self.stopped.set()
                    return
            yield word


class Model(ServedModelState):
    """A served model's state without KServe's `Model` (what the routes
    and the plane read of a `ServedModel`)."""

    def __init__(self, limits, backend=None):
        batching = {"max_batch_size": 1, "batch_wait_ms": 0.0}
        self.setup("lm", backend or Gated(), limits, batching)
        self.executor = concurrent.futures.ThreadPoolExecutor(4)


@pytest.fixture
def serving():
    """`serve(limits) -> (base url, model)`: the routes on a real
    server (uvicorn, in a thread: streamed bodies need a socket)."""
    import socket
    import time

    import uvicorn
    from fastapi import FastAPI

    from keras_attn_cli.serving.openai_routes import add_openai_routes

    servers = []

    def serve(limits, backend=None):
        app, model = FastAPI(), Model(limits, backend)
        assert add_openai_routes(app, {"lm": model}) == ["lm"]
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        config = uvicorn.Config(app, port=port, log_level="error")
        server = uvicorn.Server(config)
        threading.Thread(target=server.run, daemon=True).start()
        servers.append(server)
        while not server.started:
            time.sleep(0.02)
        return f"http://127.0.0.1:{port}", model

    yield serve
    for server in servers:
        server.should_exit = True


BODY = {"model": "lm", "prompt": "I am here.", "stream": True}


async def streamed_text(response):
    """The text of a streamed completion's chunks, joined."""
    return "".join(
        [
            json.loads(line[6:])["choices"][0]["text"]
            async for line in response.aiter_lines()
            if line.startswith("data: {")
        ]
    )


def test_the_default_stream_limit():
    from keras_attn_cli.serving.limits import DEFAULT_STREAMS, stream_limit

    assert LIMITS["max_streams"] is None  # the model's own, by default
    assert stream_limit(LIMITS, None) == DEFAULT_STREAMS == 8
    assert stream_limit(LIMITS, 16) == 16  # what the model's loops hold
    assert stream_limit({**LIMITS, "max_streams": 3}, 16) == 3


@pytest.mark.parametrize(
    "max_streams, capacity", [(1, None), (1, 5), (None, 1)]
)
def test_one_stream_past_the_limit_is_a_429_with_retry_after(
    serving, max_streams, capacity
):
    """The limit: `--max-streams`, or by default what the model's decode
    loops hold at once (its `stream_capacity`)."""
    backend = Gated()
    if capacity is not None:
        backend.stream_capacity = capacity
    limits = {**LIMITS, "max_streams": max_streams, "max_queue": 0}
    base, model = serving(limits, backend)

    async def run():
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            url = "/openai/v1/completions"
            async with client.stream("POST", url, json=BODY) as first:
                assert first.status_code == 200
                refused = await client.post(url, json=BODY)
                assert refused.status_code == 429
                assert refused.headers["retry-after"] == "1"
                error = refused.json()["error"]
                assert error["type"] == "rate_limit_error"
                assert "--max-streams" in error["message"]
                assert "--max-queue" in error["message"]
                for _ in range(3):
                    model.backend.gate.release()
                assert await streamed_text(first) == "Je suis là."
            # The stream ended: its place is free.
            for _ in range(3):
                model.backend.gate.release()
            again = await client.post(url, json=BODY)
            assert again.status_code == 200

    asyncio.run(run())


def test_a_request_past_the_running_limit_waits_in_line_then_answers(
    serving,
):
    """With `--max-streams 1` and `--max-queue 1`: the second request
    waits (counted as waiting), is answered once the first ends, and a
    third while the second waits is a 429; the metrics route's gauges
    and histograms carry vLLM's names."""
    from keras_attn_cli.serving.admission import metrics

    limits = {**LIMITS, "max_streams": 1, "max_queue": 1}
    base, model = serving(limits, Gated())
    waiting = metrics()["waiting"].labels("lm")

    async def run():
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            url = "/openai/v1/completions"
            async with client.stream("POST", url, json=BODY) as first:
                assert first.status_code == 200
                second = asyncio.create_task(
                    client.post(url, json={**BODY, "stream": False})
                )
                for _ in range(500):  # up to 10 s on a loaded machine
                    if waiting._value.get() == 1:
                        break
                    await asyncio.sleep(0.02)
                assert waiting._value.get() == 1
                third = await client.post(url, json=BODY)
                assert third.status_code == 429
                assert third.headers["retry-after"] == "1"
                for _ in range(6):  # the first's pieces, then the second's
                    model.backend.gate.release()
                assert await streamed_text(first) == "Je suis là."
            got = await second
            assert got.status_code == 200
            assert got.json()["choices"][0]["text"] == "Je suis là."

    asyncio.run(run())
    from prometheus_client import REGISTRY, generate_latest

    exposed = generate_latest(REGISTRY).decode()
    for name in (
        "keras_attn:time_to_first_token_seconds_bucket",
        "keras_attn:inter_token_latency_seconds_bucket",
        "keras_attn:request_queue_time_seconds_bucket",
        'keras_attn:num_requests_running{model_name="lm"}',
        'keras_attn:num_requests_waiting{model_name="lm"}',
    ):
        assert name in exposed, name


class Sampled(Gated):
    """A stand-in that samples: its pieces say the seed it was given."""

    sampling = True

    def stream(self, text, stop, sampling=None):
        seed = None if sampling is None else sampling["seed"]
        yield f"seed {seed}"


def test_sampling_reaches_a_model_that_samples_with_a_seed_a_choice(serving):
    base, _ = serving(LIMITS, Sampled())
    body = {"model": "lm", "prompt": "Hi.", "temperature": 0.8, "seed": 7}
    got = httpx.post(f"{base}/openai/v1/completions", json={**body, "n": 3})
    assert got.status_code == 200, got.text
    texts = [c["text"] for c in got.json()["choices"]]
    assert texts == ["seed 7", "seed 8", "seed 9"]
    greedy = httpx.post(
        f"{base}/openai/v1/completions", json={**body, "temperature": 0}
    )
    assert greedy.json()["choices"][0]["text"] == "seed None"


def test_sampling_asked_of_a_model_that_cannot_is_a_400(serving):
    base, _ = serving(LIMITS, Windowed())
    body = {"model": "lm", "prompt": "Hi.", "temperature": 0.8}
    got = httpx.post(f"{base}/openai/v1/completions", json=body)
    assert got.status_code == 400
    assert got.json()["error"]["param"] == "temperature"
    assert "no sampling" in got.json()["error"]["message"]


def test_a_client_that_hangs_up_stops_the_decoding(serving):
    base, model = serving(LIMITS)

    async def run():
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            url = "/openai/v1/completions"
            async with client.stream("POST", url, json=BODY) as first:
                model.backend.gate.release()
                async for line in first.aiter_lines():
                    if line.startswith("data: {"):
                        break  # one piece read, then the client leaves
        # The stand-in's gate stays shut: it stops only when told to.
        stopped = model.backend.stopped
        assert await asyncio.to_thread(stopped.wait, 30), "decoding went on"

    asyncio.run(run())


class Windowed(Gated):
    """A stand-in whose window is three words; its stream fails after
    its first piece when the prompt says "fail"."""

    def check_prompt(self, text):
        from keras_attn_runtime.opener import PromptTooLong

        if len(text.split()) > 3:
            raise PromptTooLong(3, len(text.split()), "words")

    def stream(self, text, stop):
        if "fail" in text:
            yield "Je"
            raise RuntimeError("the interpreter\nfell over")
        yield from super().stream(text, stop)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("chat", [False, True])
def test_a_prompt_past_the_window_is_a_400_before_any_stream(
    serving, caplog, stream, chat
):
    base, model = serving(LIMITS, Windowed())
    long = "one two three four five"
    if chat:
        url = "/openai/v1/chat/completions"
        body = {"model": "lm", "messages": [{"role": "user", "content": long}]}
    else:
        url, body = "/openai/v1/completions", {"model": "lm", "prompt": long}
    with caplog.at_level("WARNING", logger="keras_attn.serve"):
        got = httpx.post(base + url, json={**body, "stream": stream})
    assert got.status_code == 400
    assert got.headers["content-type"].startswith("application/json")
    error = got.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["param"] == ("messages" if chat else "prompt")
    assert "at most 3 words" in error["message"]
    assert "Received: 5 words" in error["message"]
    lines = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(lines) == 1 and "400" in lines[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)


def test_a_stream_that_fails_after_it_began_ends_with_an_error_and_done(
    serving, caplog
):
    base, model = serving({**LIMITS, "max_streams": 1}, Windowed())

    async def run():
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            url = "/openai/v1/completions"
            body = {**BODY, "prompt": "fail now"}
            got = await client.post(url, json=body)
            assert got.status_code == 200
            lines = [x for x in got.text.split("\n\n") if x]
            assert lines[-1] == "data: [DONE]"
            error = json.loads(lines[-2][len("data: ") :])["error"]
            assert error["type"] == "server_error"
            assert "fell over" in error["message"]
            assert json.loads(lines[0][6:])["choices"][0]["text"] == "Je"
            # Its place is free again (the limit is one stream).
            for _ in range(3):
                model.backend.gate.release()
            again = await client.post(url, json=BODY)
            assert again.status_code == 200 and "[DONE]" in again.text

    with caplog.at_level("WARNING", logger="keras_attn.serve"):
        asyncio.run(run())
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "fell over" in errors[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)


TEXTS = ["a b c", "d .", "c c a b", "a", "a zz b", "b d c"]


@pytest.mark.slow
def test_a_translators_streams_share_one_loop_and_join_to_its_answers(
    serving, tmp_path
):
    openai = pytest.importorskip("openai")
    pytest.importorskip("tensorflow")
    from keras_attn.seq2seq import samplers
    from keras_attn.translation import files
    from keras_attn_runtime import LiteRTTranslator
    from keras_attn_runtime.opener import open_litert
    from tests.timing import drained, slowed
    from tests.tiny_models import tiny_model, tiny_translator

    translator = tiny_translator(
        tiny_model(), sampler=samplers.BeamSampler(2, 0.6, 0.2)
    )
    path = str(tmp_path / "model.tflite")
    files.export_tflite(
        translator, path, search_method="beam", stream_batch=[2, 4, 8]
    )
    alone = LiteRTTranslator(path)
    want = ["".join(alone.stream(t)) for t in TEXTS]
    assert len(set(want)) > 3, want
    artifact = open_litert(path)
    assert artifact.concurrent_streams
    for loop in artifact.translator.batcher.batchers:
        slowed(loop.decoder, 0.05)  # the requests overlap
    base, _ = serving({**LIMITS, "max_streams": len(TEXTS)}, artifact)
    client = openai.OpenAI(base_url=f"{base}/openai/v1", api_key="-")

    def streamed(text):
        chunks = client.completions.create(model="lm", prompt=text, stream=True)
        return "".join(c.choices[0].text for c in chunks)

    with concurrent.futures.ThreadPoolExecutor(len(TEXTS)) as pool:
        got = list(pool.map(streamed, TEXTS))
    assert got == want
    whole = [
        client.completions.create(model="lm", prompt=t).choices[0].text
        for t in TEXTS
    ]
    assert whole == want
    batcher = artifact.translator.batcher
    assert batcher.rows_decoded / batcher.steps > 2  # sentences shared calls
    assert drained(batcher)
