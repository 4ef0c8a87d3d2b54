"""How faithful each explanation method is on each shipped classifier.

ERASER's measures (DeYoung et al. 2020): for each review, rank the tokens
the model read by a method's scores; erase the top k % and take the drop
in the predicted class's probability (comprehensiveness, higher is
better), or keep only them (sufficiency, lower is better); average over
k ∈ {1, 5, 10, 20, 50} % (AOPC), then over reviews (± one standard
error). `random` is averaged over three seeds: the floor. Cost: rows run
a review (forward passes; the gradient methods add a backward pass a
row) and seconds a review on this machine, one process.

    python -m benchmarks.faithfulness [--split test] [--reviews 300]
        [--models ssa-keras ssa-tflite edge micro] [--out FILE]

`--split validation` reads the reviews the recipes hold out of train (a
seeded permutation, 10 %): the default method is chosen there, never on
the test split. Writes `benchmarks/results/faithfulness[_SPLIT].json`.
"""

import argparse
import os
import sys
import time

import numpy as np

from benchmarks import results
from tests.paths import ROOT

SHIPPED = os.path.join(ROOT, "saved_models")
MODELS = (  # (key, label, file)
    ("ssa-keras", "imdb_ssa (.keras)", "imdb_ssa/model.keras"),
    (
        "ssa-tflite",
        "imdb_ssa (dynamic-range .tflite)",
        "imdb_ssa/model_dynamic_int8.tflite",
    ),
    (
        "edge",
        "imdb_edge (full-integer .tflite)",
        "imdb_edge/model_full_int8.tflite",
    ),
    ("micro", "imdb_micro (int8 .tflite)", "imdb_micro/model_int8.tflite"),
)
RANDOM_SEEDS = (0, 1, 2)


def reviews(split, count, seed=1337):
    """`count` reviews of `split`: a seeded sample of the test split, or
    of the recipes' validation reviews (carved from train as they carve
    it: `default_rng(1337).permutation`, the first 10 %)."""
    import tensorflow_datasets as tfds

    if split == "validation":
        data = tfds.load("imdb_reviews", split="train", batch_size=-1)
        texts = tfds.as_numpy(data)["text"]
        order = np.random.default_rng(1337).permutation(len(texts))
        pool = order[: int(len(texts) * 0.1)]
    else:
        data = tfds.load("imdb_reviews", split="test", batch_size=-1)
        texts = tfds.as_numpy(data)["text"]
        pool = np.arange(len(texts))
    picked = np.random.default_rng(seed).choice(pool, count, replace=False)
    return [texts[i].decode("utf-8") for i in picked]


def measure(reader, items, method, seeds=(0,), **options):
    """Mean and standard error of AOPC comprehensiveness and sufficiency
    over `items`, with the mean rows and seconds a review."""
    from keras_attn_runtime import attribution as core

    comp, suff, passes, seconds = [], [], [], []
    for seed in seeds:
        got = core.attribute_items(reader, items, method, seed, **options)
        for item, r in zip(items, got, strict=True):
            e = core.erasure(reader, item, r["scores"], base=r["probability"])
            comp.append(e["aopc_comprehensiveness"])
            suff.append(e["aopc_sufficiency"])
            passes.append(r["passes"])
            seconds.append(r["seconds"])
    comp, suff = np.array(comp), np.array(suff)
    n = len(items)  # seeds average the same reviews: their error is per review
    by_review_c = comp.reshape(len(seeds), n).mean(0)
    by_review_s = suff.reshape(len(seeds), n).mean(0)
    return {
        "comprehensiveness": round(float(by_review_c.mean()), 4),
        "comprehensiveness_se": round(
            float(by_review_c.std(ddof=1) / np.sqrt(n)), 4
        ),
        "sufficiency": round(float(by_review_s.mean()), 4),
        "sufficiency_se": round(float(by_review_s.std(ddof=1) / np.sqrt(n)), 4),
        "passes_per_review": round(float(np.mean(passes)), 1),
        "seconds_per_review": round(float(np.mean(seconds)), 4),
    }


def model_rows(label, relative, texts, methods=None, row_file_reviews=100):
    """The rows of one shipped file: every method it runs, on `texts`
    (the first `row_file_reviews` for a file that runs a row at a time)."""
    from keras_attn import explain
    from keras_attn_runtime import attribution as core

    reader = explain.reader_for(os.path.join(SHIPPED, relative))
    if getattr(reader, "dynamic", False):
        texts = texts[:row_file_reviews]
    items = reader.read(texts)
    found = {}
    for method in core.available(reader):
        if methods is not None and method not in methods:
            continue
        start = time.perf_counter()
        seeds = RANDOM_SEEDS if method == "random" else (0,)
        row = {"model": label, "method": method, "reviews": len(items)}
        row.update(measure(reader, items, method, seeds))
        found[method] = row
        print(
            f"{label}: {row} ({time.perf_counter() - start:.0f} s)", flush=True
        )
    occlusion = found.get("occlusion")
    for row in found.values():
        if occlusion and occlusion["comprehensiveness"]:
            ratio = row["comprehensiveness"] / occlusion["comprehensiveness"]
            row["comprehensiveness_vs_occlusion"] = round(ratio, 3)
    return [{k: row[k] for k in COLUMNS if k in row} for row in found.values()]


COLUMNS = (
    "model",
    "method",
    "reviews",
    "comprehensiveness",
    "comprehensiveness_se",
    "comprehensiveness_vs_occlusion",
    "sufficiency",
    "sufficiency_se",
    "passes_per_review",
    "seconds_per_review",
)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", choices=("test", "validation"))
    parser.add_argument("--reviews", type=int, default=300)
    parser.add_argument(
        "--row-file-reviews",
        type=int,
        default=50,
        help="the first reviews of the sample for a file that runs a row "
        "at a time (the dynamic-range .tflite)",
    )
    parser.add_argument(
        "--models",
        nargs="*",
        default=None,
        help="the files to measure, by key (ssa-keras, ssa-tflite, edge, "
        "micro) or the start of their label (default: all)",
    )
    parser.add_argument("--methods", nargs="*", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    split = args.split or "test"
    argv = sys.argv[1:] if argv is None else argv

    texts = reviews(split, args.reviews)
    rows = [
        row
        for key, label, relative in MODELS
        if not args.models
        or any(m == key or label.startswith(m) for m in args.models)
        for row in model_rows(
            label, relative, texts, args.methods, args.row_file_reviews
        )
    ]
    name = (
        "faithfulness.json" if split == "test" else f"faithfulness_{split}.json"
    )
    path = args.out or os.path.join(results.RESULTS, name)
    meta = results.meta("faithfulness", argv, split=split)
    results.save(path, meta, rows)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
