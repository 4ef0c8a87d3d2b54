"""A new version rolled into `keras-attn serve` under load: how long from
the rename to the first answer of the new version, and what the
requests around the swap wait, against the steady state's.

The shipped classifier's SavedModel (`imdb_ssa`) is copied as version 1
of a folder of numbered versions and served with the default poll
(`--file-system-poll-wait-seconds 1`). `--clients` threads send
unversioned TensorFlow Serving gRPC `Predict` calls (one review each;
the answer names the version that gave it) for `--steady` seconds; then
each of `--swaps` new versions is written under a hidden name and
renamed into place, `--steady` seconds apart. Rows: one a swap, with the
time from the rename to the new version's first answer, that answer's
latency, the median and the slowest of its first 20, and the p50/p99
of every request that ended within 5 s after the rename; the summary
gives the steady state's p50/p99 (the requests before the first rename,
past the first second) and the failures.

    python -m benchmarks.version_swap [--clients 8] [--swaps 3] [--steady 10]

Writes `benchmarks/results/version_swap.json`.
"""

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

import numpy as np

from benchmarks import results
from tests.serving.live import SHIPPED, output_all, start

SOURCE = os.path.join(SHIPPED, "imdb_ssa", "saved_model")
REVIEW = "A wonderful film, moving and funny, though the ending drags."
WINDOW_S = 5.0


def client(grpc_port, answers, stop):
    """Unversioned `Predict` calls until `stop`: `(start, end, version,
    error)` each."""
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    call = predict_pb2.PredictRequest()
    call.model_spec.name = "reviews"
    call.inputs["text"].CopyFrom(tf.make_tensor_proto([REVIEW]))
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        while not stop.is_set():
            began = time.monotonic()
            try:
                answer = stub.Predict(call, timeout=60)
                version, error = answer.model_spec.version.value, None
            except grpc.RpcError as err:
                version, error = None, err.code().name
            answers.append((began, time.monotonic(), version, error))


def percentiles(latencies):
    values = np.asarray(latencies) * 1000
    return round(float(np.percentile(values, 50)), 1), round(
        float(np.percentile(values, 99)), 1
    )


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--swaps", type=int, default=3)
    parser.add_argument("--steady", type=float, default=10.0)
    parser.add_argument(
        "--out", default=os.path.join(results.RESULTS, "version_swap.json")
    )
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp()
    base = os.path.join(work, "reviews")
    shutil.copytree(SOURCE, os.path.join(base, "1"))
    proc, _ = start(base)
    answers, stop = [], threading.Event()
    threads = [
        threading.Thread(
            target=client, args=(proc.grpc_port, answers, stop), daemon=True
        )
        for _ in range(args.clients)
    ]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    renamed = {}
    try:
        time.sleep(args.steady)
        for version in range(2, args.swaps + 2):
            hidden = os.path.join(base, f".{version}.partial")
            shutil.copytree(SOURCE, hidden)
            renamed[version] = time.monotonic()
            os.rename(hidden, os.path.join(base, str(version)))
            time.sleep(args.steady)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
        log = output_all(proc)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    first_swap = min(renamed.values())
    steady = [
        end - start
        for start, end, _, error in answers
        if began + 1 < start and end < first_swap and error is None
    ]
    rows = []
    for version, at in sorted(renamed.items()):
        new = sorted(a for a in answers if a[2] == version)
        window = [
            end - start
            for start, end, _, error in answers
            if at <= end < at + WINDOW_S and error is None
        ]
        p50, p99 = percentiles(window)
        first = new[0] if new else None
        first_20 = [(end - start) * 1000 for start, end, _, _ in new[:20]]
        rows.append(
            {
                "version": version,
                "rename_to_first_answer_s": first and round(first[1] - at, 2),
                "first_answer_ms": first
                and round((first[1] - first[0]) * 1000, 1),
                "first_20_answers_max_ms": round(max(first_20), 1),
                "first_20_answers_median_ms": round(
                    float(np.median(first_20)), 1
                ),
                "window_p50_ms": p50,
                "window_p99_ms": p99,
                "window_requests": len(window),
            }
        )
        print(rows[-1], flush=True)
    p50, p99 = percentiles(steady)
    failed = [a for a in answers if a[3] is not None]
    summary = {
        "clients": args.clients,
        "poll_s": 1.0,
        "steady_p50_ms": p50,
        "steady_p99_ms": p99,
        "steady_requests": len(steady),
        "requests": len(answers),
        "failed": len(failed),
        # The server's load lines, the temporary folder left out.
        "load_lines": [
            line.split("keras-attn serve: ")[-1].replace(work + os.sep, "")
            for line in log.splitlines()
            if "loaded reviews" in line
        ],
    }
    print(summary, flush=True)
    meta = results.meta("version_swap", argv, model="imdb_ssa SavedModel")
    results.save(args.out, meta, rows, summary=summary)


if __name__ == "__main__":
    main()
