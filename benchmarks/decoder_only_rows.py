"""A decoder-only model's requests in one shared decode loop, rows at
positions of their own (`keras_attn.export.cached_decoder`,
`keras_attn_runtime.batching.RowBatcher`), against Google's LiteRT-LM
engine running the same model's `.litertlm` bundle one request at a
time.

The model has the shipped decoder-only translator's shape
(`benchmarks.litertlm_engine.SHAPE`, a 128-token context), random
weights, int8 weights (dynamic range) in both files. A request is a
12-token prompt (11 prefilled, the last fed as the first step's token)
and 24 new tokens (no end token). Closed loop: `C` clients, each
sending `--requests` requests one after the other; every client's
request joins the loop at its next step. Reported: streams per second,
tokens per second, time to the first token and between tokens (p50,
p99). The engine's row is its in-process `Benchmark` (one request at a
time: `1 / (prefill + decode time)`), not `litert-lm serve` over HTTP.

    python -m benchmarks.decoder_only_rows [--requests 6]

Writes `benchmarks/results/decoder_only_rows.json`.
"""

import argparse
import json
import os
import sys
import tempfile
import threading
import time

import numpy as np

from benchmarks import results
from benchmarks.litertlm_engine import (
    CONTEXT,
    SHAPE,
    _version,
    random_generator,
)

PROMPT, NEW = 12, 24
CLIENTS = (1, 4, 16)


def build(folder):
    """The model's streaming file (rows at their own positions) and its
    `.litertlm` bundle, under `folder`."""
    import tensorflow as tf

    from keras_attn.export import cached_decoder, export_streaming_tflite

    model, generator = random_generator()
    generator.export_litertlm(
        os.path.join(folder, "model.litertlm"),
        prefill_lengths=(8, 32),
        quantize="dynamic",
    )
    export_streaming_tflite(
        cached_decoder(model, CONTEXT),
        os.path.join(folder, "rows.tflite"),
        start_signature=[{"prompt": tf.TensorSpec([1, 16], tf.int32)}],
        step_batch=[1, 2, 4, 8, 16],
        quantize="dynamic",
        settings={"start_id": 2, "end_id": -1, "max_length": NEW},
    )


def _percentile(values, q):
    return round(float(np.percentile(values, q)) * 1e3, 2)


def closed_loop(path, clients, requests, kernels):
    """One row: `clients` threads, `requests` each, on one loop whose
    file runs on `kernels` (`cpu_kernels`)."""
    from keras_attn_runtime import StreamingDecoder
    from keras_attn_runtime.batching import RowBatcher

    batcher = RowBatcher(StreamingDecoder(path, cpu_kernels=kernels))
    rng = np.random.default_rng(clients)
    first, gaps, counts = [], [], []

    def client(seed):
        prompts = np.random.default_rng(seed).integers(
            4, SHAPE["vocabulary_size"], (requests, PROMPT)
        )
        for prompt in prompts:
            sent = last = time.perf_counter()
            n = 0
            for ids, _ in batcher.search(
                {"prompt": prompt[None, :-1].astype("int32")},
                first_token=int(prompt[-1]),
            ):
                now = time.perf_counter()
                (first if n == 0 else gaps).append(
                    now - (sent if n == 0 else last)
                )
                last, n = now, len(ids)
            counts.append(n)

    warm = threading.Thread(target=client, args=(0,))
    warm.start()
    warm.join()
    first.clear(), gaps.clear(), counts.clear()
    threads = [
        threading.Thread(target=client, args=(int(s),))
        for s in rng.integers(1, 1 << 30, clients)
    ]
    begin = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - begin
    return {
        "runner": f"RowBatcher, rows at their own positions ({kernels})",
        "clients": clients,
        "streams_per_s": round(len(counts) / took, 1),
        "tokens_per_s": round(sum(counts) / took, 1),
        "ttft_p50_ms": _percentile(first, 50),
        "ttft_p99_ms": _percentile(first, 99),
        "inter_token_p50_ms": _percentile(gaps, 50),
        "inter_token_p99_ms": _percentile(gaps, 99),
        "mean_rows_a_call": round(batcher.rows_decoded / batcher.steps, 2),
    }


def engine(folder, requests):
    """LiteRT-LM's engine, one request at a time (its `Benchmark`)."""
    import litert_lm

    litert_lm.set_min_log_severity(litert_lm.LogSeverity.ERROR)
    took = []
    for _ in range(requests + 1):  # the first loads
        info = litert_lm.Benchmark(
            model_path=os.path.join(folder, "model.litertlm"),
            backend=litert_lm.Backend.CPU(thread_count=1),
            prefill_tokens=PROMPT,
            decode_tokens=NEW,
            prompt="w5 " * PROMPT,
        ).run()
        prefill = info.last_prefill_token_count / (
            info.last_prefill_tokens_per_second
        )
        decode = info.last_decode_token_count / (
            info.last_decode_tokens_per_second
        )
        took.append((prefill, decode, info.last_decode_token_count))
    took = took[1:]
    prefill = float(np.median([t[0] for t in took]))
    decode = float(np.median([t[1] for t in took]))
    tokens = took[0][2]
    return {
        "runner": "LiteRT-LM engine, one request at a time",
        "clients": 1,
        "streams_per_s": round(1 / (prefill + decode), 1),
        "tokens_per_s": round(tokens / (prefill + decode), 1),
        "ttft_p50_ms": round(prefill * 1e3, 2),
        "ttft_p99_ms": "n/a",
        "inter_token_p50_ms": round(decode * 1e3 / tokens, 2),
        "inter_token_p99_ms": "n/a",
        "mean_rows_a_call": 1.0,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=6)
    args = parser.parse_args(argv)
    import ai_edge_litert

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        build(folder)
        rows.append(engine(folder, args.requests))
        print(json.dumps(rows[-1]), flush=True)
        path = os.path.join(folder, "rows.tflite")
        for kernels in ("builtin", "xnnpack"):
            for clients in CLIENTS:
                rows.append(closed_loop(path, clients, args.requests, kernels))
                print(json.dumps(rows[-1]), flush=True)
    out = results.save(
        os.path.join(results.RESULTS, "decoder_only_rows.json"),
        results.meta(
            "decoder_only_rows",
            sys.argv[1:] if argv is None else argv,
            ai_edge_litert=getattr(ai_edge_litert, "__version__", "2.3"),
            litert_lm=_version("litert-lm-api"),
        ),
        rows,
    )
    print("wrote", out)


if __name__ == "__main__":
    main()
