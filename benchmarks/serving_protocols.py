"""`keras-attn serve`: one request's latency through each protocol.

One server of the shipped `imdb_ssa` SavedModel; one client sends the
same reviews one at a time, one review a request, through TensorFlow
Serving's REST API (`POST /v1/models/NAME:predict`, JSON), its gRPC API
(`PredictionService.Predict`, `tensorflow-serving-api`'s stub) and
KServe's v2 REST API (`POST /v2/models/NAME/infer`, JSON), the order
rotating each round so that drift falls on all alike. Rows: median and
p90 latency, and each protocol's median over REST's.

    python -m benchmarks.serving_protocols [--requests 150]

Writes `benchmarks/results/serving_protocols.json`.
"""

import argparse
import os
import signal
import sys
import time

import numpy as np

from benchmarks import results
from tests.serving.live import REVIEWS, infer, post, start

MODEL = "imdb_ssa"


def clients(port, grpc_port):
    """`{protocol: send(text)}`, each a blocking call."""
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    stub = prediction_service_pb2_grpc.PredictionServiceStub(
        grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    )

    def rest(text):
        status, _ = post(port, MODEL, {"instances": [text]})
        assert status == 200

    def tf_grpc(text):
        call = predict_pb2.PredictRequest()
        call.model_spec.name = MODEL
        call.inputs["text"].CopyFrom(tf.make_tensor_proto([text]))
        stub.Predict(call, timeout=60)

    def v2_rest(text):
        status, _ = infer(port, MODEL, [text], outputs=["probability"])
        assert status == 200

    return {"REST": rest, "gRPC": tf_grpc, "v2 REST": v2_rest}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument(
        "--out",
        default=os.path.join(results.RESULTS, "serving_protocols.json"),
    )
    args = parser.parse_args(argv)
    proc, port = start(MODEL, "--max-batch-size", "1")
    try:
        sends = clients(port, proc.grpc_port)
        names = list(sends)
        for send in sends.values():  # warm up each path
            for text in REVIEWS:
                send(text)
        times = {name: [] for name in names}
        for i in range(args.requests):
            text = f"{REVIEWS[i % len(REVIEWS)]} ({i})"
            shift = i % len(names)
            for name in names[shift:] + names[:shift]:
                start_s = time.perf_counter()
                sends[name](text)
                times[name].append(time.perf_counter() - start_s)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    rows = []
    base = float(np.median(times["REST"]))
    for name in names:
        ms = np.array(times[name]) * 1000
        rows.append(
            {
                "protocol": name,
                "p50_ms": round(float(np.median(ms)), 2),
                "p90_ms": round(float(np.percentile(ms, 90)), 2),
                "p50_over_rest": round(float(np.median(ms)) / 1000 / base, 3),
            }
        )
    for row in rows:
        print(row)
    meta = results.meta(
        "serving_protocols",
        sys.argv[1:] if argv is None else argv,
        requests=args.requests,
        request="one review per request, one client, batching off",
    )
    results.save(args.out, meta, rows)


if __name__ == "__main__":
    main()
