"""The translator served to streaming clients: iteration-level batching
against request-level merging, in one run on one server.

`keras-attn serve translation_en_fr` answers TensorFlow Serving's REST
`:predict` from the SavedModel, requests merged into batches (a request
waits for the slowest sentence it was merged with), and `keras-attn
serve translation_en_fr --prefer litert` answers OpenAI's
`/openai/v1/completions` with `"stream": true` from the folder's LiteRT
file, whose streaming signatures decode every stream in one loop: a
request takes free rows at the next step, its words go out as its beams
agree on them, and it leaves when it ends.

With 1, 4 and 16 clients, each sending one held-out sentence at a time
(the same sentences on both paths): sentences/s, words/s, latency p50 and
p99, and for the streams the time to the first words p50 and p99. Then
a short sentence sent beside a long one, against the short one alone.
Every streamed answer, joined, is checked against the unstreamed OpenAI
answer, and against the same sentence streamed by one client.

    python -m benchmarks.serving_streams [--sentences 96]

Writes `benchmarks/results/serving_streams.json`.
"""

import argparse
import concurrent.futures
import json
import os
import signal
import sys
import time

import numpy as np

from benchmarks import results
from tests.serving.live import post, request, start

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "translation_en_fr"
SHORT, LONG = (
    "I am tired.",
    "When we arrived at the station, the last train had already left and "
    "we had to walk all the way home in the rain.",
)


def sentences(count):
    """Held-out English sentences of the translator's split (its
    validation side), in a fixed order."""
    sys.path.insert(0, os.path.join(ROOT, "recipes"))
    import translation

    from keras_attn.translation import read_pairs, references, split_by_source

    with open(
        os.path.join(ROOT, "saved_models", NAME, "metrics.json"),
        encoding="utf-8",
    ) as f:
        hp = json.load(f)["hyperparameters"]
    _, val = split_by_source(
        read_pairs(translation.DEFAULT_PAIRS), hp["val_fraction"], hp["seed"]
    )
    return references(val)[0][:count]


def streamed(port, text):
    """`(answer, seconds to the first words, seconds in all)` of one
    streamed completion."""
    import http.client

    body = json.dumps({"model": NAME, "prompt": text, "stream": True})
    begin = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request(
        "POST",
        "/openai/v1/completions",
        body,
        {"Content-Type": "application/json"},
    )
    reply = conn.getresponse()
    assert reply.status == 200, reply.read()
    parts, first = [], None
    for line in reply:
        line = line.decode().strip()
        if not line.startswith("data: {"):
            continue
        piece = json.loads(line[6:])["choices"][0]["text"]
        if piece and first is None:
            first = time.perf_counter() - begin
        parts.append(piece)
    conn.close()
    took = time.perf_counter() - begin
    return "".join(parts), first if first is not None else took, took


def whole(port, text):
    """The unstreamed OpenAI answer."""
    body = json.dumps({"model": NAME, "prompt": text}).encode()
    status, answer = request(
        port,
        "POST",
        "/openai/v1/completions",
        body,
        {"Content-Type": "application/json"},
    )
    assert status == 200, answer
    return answer["choices"][0]["text"]


def merged(port, text):
    begin = time.perf_counter()
    status, answer = post(port, NAME, {"instances": [text]})
    assert status == 200, answer
    took = time.perf_counter() - begin
    return answer["predictions"][0]["translation"], took, took


def load(run, port, batch, clients):
    """`(seconds, [(answer, first, took)])` of `batch` sent by `clients`
    at once, one sentence a request."""
    begin = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        out = list(pool.map(lambda t: run(port, t), batch))
    return time.perf_counter() - begin, out


def row(path, clients, seconds, out):
    first = np.array([f for _, f, _ in out]) * 1e3
    took = np.array([t for _, _, t in out]) * 1e3
    words = sum(len(a.split()) for a, _, _ in out)
    return {
        "path": path,
        "clients": clients,
        "sentences_per_s": len(out) / seconds,
        "words_per_s": words / seconds,
        "p50_ms": float(np.percentile(took, 50)),
        "p99_ms": float(np.percentile(took, 99)),
        "first_words_p50_ms": float(np.percentile(first, 50)),
        "first_words_p99_ms": float(np.percentile(first, 99)),
        # When the first words come, as a share of the whole answer's
        # time (a beam's words go out once its beams agree on them).
        "first_words_share_p50": float(np.median(first / took)),
    }


def short_beside_long(port, run, repeats=5):
    """Median seconds of the short sentence alone, and sent while the
    long one is decoding."""
    alone, beside = [], []
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for _ in range(repeats):
            alone.append(run(port, SHORT)[2])
            slow = pool.submit(run, port, LONG)
            time.sleep(0.005)
            beside.append(run(port, SHORT)[2])
            slow.result()
    return float(np.median(alone)), float(np.median(beside))


def step_ms(kernels, rows=(4, 16, 32), repeats=20):
    """Milliseconds of one `decode` call of the shipped file at each row
    count, on LiteRT's `kernels` (one thread)."""
    from keras_attn_runtime import LiteRTTranslator

    lite = LiteRTTranslator(
        os.path.join(ROOT, "saved_models", NAME, "model.tflite"),
        cpu_kernels=kernels,
    )
    source = np.zeros((1, lite.length), "int32")
    source[0, :8] = np.arange(2, 10)
    state = lite.decoder.start(source=source)
    out = {}
    for n in rows:
        rows_state = {k: np.repeat(v[:1], n, 0) for k, v in state.items()}
        tokens = np.full((n,), 2, "int32")
        for _ in range(3):
            lite.decoder.step(tokens, 0, rows_state)
        begin = time.perf_counter()
        for _ in range(repeats):
            lite.decoder.step(tokens, 0, rows_state)
        out[f"decode_{n}_rows_ms_{kernels}"] = (
            (time.perf_counter() - begin) / repeats * 1e3
        )
    return out


def in_process(batch, kernels, loops, clients=16):
    """The decode loops without the server: sentences/s of `batch`
    streamed by `clients` threads at once on LiteRT's `kernels` in
    `loops` loops, and how many equal the file's answers one at a
    time."""
    from keras_attn_runtime import LiteRTTranslator

    path = os.path.join(ROOT, "saved_models", NAME, "model.tflite")
    alone = LiteRTTranslator(path, cpu_kernels=kernels)
    want = ["".join(alone.stream(t)) for t in batch]
    lite = LiteRTTranslator(path, cpu_kernels=kernels)
    lite.batch_streams(loops=loops)
    begin = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        got = list(pool.map(lambda t: "".join(lite.stream(t)), batch))
    seconds = time.perf_counter() - begin
    name = f"{loops}_loops_{kernels}"
    return {
        f"{name}: {clients} threads sentences/s": len(batch) / seconds,
        f"{name}: equal to alone": sum(
            a == b for a, b in zip(got, want, strict=True)
        ),
    }


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=96)
    parser.add_argument(
        "--out", default="benchmarks/results/serving_streams.json"
    )
    args = parser.parse_args(argv)
    batch = sentences(args.sentences)
    # A name answers from one file at every door: the SavedModel, or the
    # LiteRT file under --prefer litert; a server each.
    saved, saved_port = start(NAME, "--max-streams", "64")
    lite, port = start(NAME, "--max-streams", "64", "--prefer", "litert")
    ports = {merged: saved_port, streamed: port}
    rows, checks = [], {}
    try:
        load(streamed, port, batch[:8], 4)  # warm up both paths
        load(merged, saved_port, batch[:8], 4)
        alone = {}
        for clients in (1, 4, 16):
            for path, run in (
                ("merged :predict", merged),
                ("streams", streamed),
            ):
                seconds, out = load(run, ports[run], batch, clients)
                rows.append(row(path, clients, seconds, out))
                print(rows[-1], flush=True)
                if path == "streams":
                    answers = [a for a, _, _ in out]
                    alone = alone or dict(zip(batch, answers, strict=True))
                    checks[f"streams_{clients}_equal_to_one_client"] = sum(
                        alone[t] == a
                        for t, a in zip(batch, answers, strict=True)
                    )
        unstreamed = [whole(port, t) for t in batch]
        checks["streams_joined_equal_to_unstreamed"] = sum(
            alone[t] == u for t, u in zip(batch, unstreamed, strict=True)
        )
        checks["sentences"] = len(batch)
        for path, run in (("merged :predict", merged), ("streams", streamed)):
            short, beside = short_beside_long(ports[run], run)
            checks[f"{path}: short alone ms"] = short * 1e3
            checks[f"{path}: short beside long ms"] = beside * 1e3
    finally:
        for proc in (saved, lite):
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    for kernels in ("builtin", "xnnpack"):  # what a faster step buys
        checks.update(step_ms(kernels))
        for loops in (1, 2):
            checks.update(in_process(batch, kernels, loops))
    print(json.dumps(checks, indent=2))
    meta = results.meta(
        "serving_streams",
        sys.argv[1:] if argv is None else argv,
        sentences=args.sentences,
        server=f"keras-attn serve {NAME} --max-streams 64 (batching "
        "defaults: max batch 32, wait 5 ms); the streams: the same with "
        "--prefer litert",
    )
    results.save(args.out, meta, rows, checks=checks)


if __name__ == "__main__":
    main()
