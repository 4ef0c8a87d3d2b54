"""Batch-1 latency and batch-64 throughput of a shipped IMDB model.

Compares, on the same reviews and interleaved: Keras `model(x)`, Keras
`model.predict(x)`, the SavedModel signature, and LiteRT float32 / int8
with 1 and 2 threads (tokenization included for every path).

    python -m benchmarks.inference_latency saved_models/imdb_ssa [--reps 30]

Writes `benchmarks/results/inference_latency.json` and prints a table.
"""

import argparse
import json
import os
import platform
import shlex
import sys
import time

import numpy as np

REVIEW = (
    "I went in expecting little, but the cast is wonderful and the story "
    "kept me hooked until the very end. The photography is gorgeous, the "
    "score is moving, and the two leads have real chemistry. A few scenes "
    "drag in the middle, yet the ending more than makes up for it. "
) * 3


def main(argv=None):
    import keras
    import tensorflow as tf

    import keras_attn  # noqa: F401
    from keras_attn_runtime import LiteRTClassifier

    p = argparse.ArgumentParser()
    p.add_argument("folder")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument(
        "--test-reviews",
        type=int,
        default=0,
        help="also time Keras predict and LiteRT (1 thread) one review at "
        "a time over this many IMDB test reviews (tfds; real lengths)",
    )
    p.add_argument("--out", default="benchmarks/results/inference_latency.json")
    args = p.parse_args(argv)
    model = keras.models.load_model(os.path.join(args.folder, "model.keras"))
    served = tf.saved_model.load(os.path.join(args.folder, "saved_model"))
    fn = served.signatures["serving_default"]
    one = np.array([REVIEW], dtype=object)
    many = np.array([REVIEW] * 64, dtype=object)
    paths = {
        "keras model(x)": lambda x: model(x),
        "keras predict": lambda x: model.predict(x, verbose=0),
        "SavedModel": lambda x: fn(tf.constant(list(x))),
    }
    for name in ("model_float32.tflite", "model_dynamic_int8.tflite"):
        path = os.path.join(args.folder, name)
        if os.path.isfile(path):
            for threads in (1, 2):
                clf = LiteRTClassifier(path, num_threads=threads)
                label = (
                    f"LiteRT {name.split('_')[1].split('.')[0]} "
                    f"{threads} thread{'s' * (threads > 1)}"
                )
                paths[label] = (lambda c: lambda x: c.predict(list(x)))(clf)
    times = {k: [] for k in paths}
    for f in paths.values():  # warm up
        f(one)
    for _ in range(args.reps):
        for name, f in paths.items():
            start = time.perf_counter()
            f(one)
            times[name].append(time.perf_counter() - start)
    throughput = {}
    for name, f in paths.items():
        f(many)
        start = time.perf_counter()
        f(many)
        throughput[name] = 64 / (time.perf_counter() - start)
    base = np.median(times["keras predict"])
    rows = []
    for name in paths:
        med = float(np.median(times[name]))
        rows.append(
            {
                "path": name,
                "batch1_ms": med * 1e3,
                "speedup_vs_keras_predict": float(base / med),
                "batch64_reviews_per_s": throughput[name],
            }
        )
        print(
            f"{name:28s} {med * 1e3:9.2f} ms  x{base / med:6.2f}  "
            f"{throughput[name]:8.1f} reviews/s"
        )
    per_review = (
        time_real_reviews(paths, args.test_reviews)
        if args.test_reviews
        else None
    )
    meta = {
        "command": "python -m benchmarks.inference_latency "
        + shlex.join(sys.argv[1:] if argv is None else argv),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "tensorflow": tf.__version__,
        "reps": args.reps,
        "review_words": len(REVIEW.split()),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(
            {"meta": meta, "rows": rows, "real_reviews": per_review},
            f,
            indent=2,
        )


def time_real_reviews(paths, n, seed=0):
    """Mean batch-1 time per review over `n` random IMDB test reviews.

    Real reviews vary in length (a variable-length LiteRT model runs each
    at its own length), so one fixed review can flatter or hide that. The
    paths are interleaved per review.
    """
    import tensorflow_datasets as tfds

    texts = tfds.load(
        "imdb_reviews", split="test", batch_size=-1, as_supervised=True
    )[0].numpy()
    rng = np.random.default_rng(seed)
    sample = [t.decode("utf-8") for t in texts[rng.permutation(len(texts))[:n]]]
    chosen = {
        k: f
        for k, f in paths.items()
        if k == "keras predict" or (k.startswith("LiteRT") and "1 thread" in k)
    }
    times = {k: [] for k in chosen}
    for text in sample:
        one = np.array([text], dtype=object)
        for name, f in chosen.items():
            start = time.perf_counter()
            f(one)
            times[name].append(time.perf_counter() - start)
    base = np.mean(times["keras predict"])
    words = [len(t.split()) for t in sample]
    out = {
        "reviews": n,
        "words_median": float(np.median(words)),
        "words_max": int(max(words)),
        "mean_ms": {k: float(np.mean(v) * 1e3) for k, v in times.items()},
        "speedup_vs_keras_predict": {
            k: float(base / np.mean(v)) for k, v in times.items()
        },
    }
    for name in chosen:
        print(
            f"{n} test reviews, {name:24s} mean {out['mean_ms'][name]:8.2f} "
            f"ms/review  x{out['speedup_vs_keras_predict'][name]:6.2f}"
        )
    return out


if __name__ == "__main__":
    main()
