"""`keras-attn serve` under load: throughput and latency by concurrency.

For each backend of the shipped IMDB models (the SavedModel of
`imdb_ssa`, the full-integer LiteRT file of `imdb_edge`) and for the
translator's SavedModel, a server is started (`keras-attn serve MODEL
--port P`) and clients send one text per request (a review; for the
translator a sentence of the Tatoeba pairs in `../shared/data`), with 1,
4 and 16 clients at once; every client's answer is checked against the
one-client run's (the same strings and shapes, numbers within 1e-5).
The same texts are also run by calling the model directly, one at a
time, in this process (the floor that HTTP and JSON add to). Rows:
requests per second, p50 and p99 latency, and the throughput ratio
against sequential single requests through the server (`16 clients / 1
client`).

    python -m benchmarks.serving [--requests 192]

Writes `benchmarks/results/serving.json`.
"""

import argparse
import concurrent.futures
import os
import random
import signal
import sys
import time

import numpy as np

from benchmarks import results
from tests.serving.live import (
    REVIEWS,
    post,
    same_answer,
    start,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# backend: (served name and folder, the artifact the server runs)
BACKENDS = {
    "SavedModel": ("imdb_ssa", "saved_models/imdb_ssa/saved_model"),
    "LiteRT": ("imdb_edge", "saved_models/imdb_edge/model_full_int8.tflite"),
    "translator": (
        "translation_en_fr",
        "saved_models/translation_en_fr/saved_model",
    ),
}


# English sentences of the Tatoeba pairs (`../shared/data`, the
# translator's data), a fixed sample: what a translator's clients send.
PAIRS = os.path.join(ROOT, "..", "shared", "data", "translation", "pairs.tsv")


def texts(count, sentences=False):
    if sentences:
        with open(PAIRS, encoding="utf-8") as f:
            english = [line.split("\t")[0] for line in f if "\t" in line]
        return random.Random(0).sample(english, count)
    return [f"{REVIEWS[i % len(REVIEWS)]} (review {i})" for i in range(count)]


def load(port, name, batch, clients):
    """Requests per second, per-request latencies (s) and the answers."""

    def one(text):
        start = time.perf_counter()
        status, answer = post(port, name, {"instances": [text]})
        assert status == 200
        return time.perf_counter() - start, answer["predictions"][0]

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        timed = list(pool.map(one, batch))
    per_s = len(batch) / (time.perf_counter() - start)
    return per_s, [t for t, _ in timed], [a for _, a in timed]


def direct(path, batch):
    """The model called in-process, one review at a time."""
    from keras_attn_cli.serving.served import load_backend

    backend = load_backend(os.path.join(ROOT, path))
    latencies = []
    start = time.perf_counter()
    for text in batch:
        t = time.perf_counter()
        backend.run(
            "serving_default", {"text": np.array([text.encode()], object)}
        )
        latencies.append(time.perf_counter() - t)
    return len(batch) / (time.perf_counter() - start), latencies


def row(backend, how, clients, per_s, latencies, base=None):
    ms = np.array(latencies) * 1e3
    record = {
        "backend": backend,
        "path": how,
        "clients": clients,
        "requests_per_s": float(per_s),
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
    }
    if base is not None:  # throughput against one client, same server
        record["throughput_ratio"] = float(per_s / base)
    return record


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=192)
    parser.add_argument("--out", default="benchmarks/results/serving.json")
    args = parser.parse_args(argv)
    rows = []
    for backend, (name, path) in BACKENDS.items():
        batch = texts(args.requests, backend == "translator")
        direct(path, batch[:8])  # warm up
        per_s, latencies = direct(path, batch)
        rows.append(row(backend, "direct call", 1, per_s, latencies))
        proc, port = start(os.path.join("saved_models", name))
        try:
            load(port, name, batch[:16], 4)  # warm up
            base = first = None
            for clients in (1, 4, 16):
                per_s, latencies, answers = load(port, name, batch, clients)
                base, first = base or per_s, first or answers
                for text, a, b in zip(batch, first, answers, strict=True):
                    same_answer(a, b, text)
                rows.append(
                    row(backend, "server", clients, per_s, latencies, base)
                )
                print(rows[-1], flush=True)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    import tensorflow as tf  # noqa: F401  (its version in the record)

    meta = results.meta(
        "serving",
        sys.argv[1:] if argv is None else argv,
        requests=args.requests,
        request="one text per request (a review, or a Tatoeba sentence)",
        batching="max batch 32, wait 5 ms (the defaults)",
    )
    results.save(args.out, meta, rows)


if __name__ == "__main__":
    main()
