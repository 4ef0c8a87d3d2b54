"""
Title: An attention classifier that fits a microcontroller
Author: keras_attn contributors
Description: The edge recipe's attention-only IMDB model, made small
enough for a microcontroller: a full-integer LiteRT file under 1 MiB that
TensorFlow Lite Micro runs in a tensor arena under 256 KiB, its accuracy
measured through TFLM itself.

Run it: `python recipes/imdb_micro.py --out saved_models` (a few minutes
on two CPU cores; `--limit 2000 --epochs 1` for a quick look), with
`pip install -e ./runtime -e ".[cpu,examples,export,edge]"`.
Results: docs/edge.md.
"""

"""
## The bounds

A microcontroller holds the model in flash and its activations in RAM.
The recipe keeps both in bounds and fails if they are not:

- the `.tflite` file, vocabulary included, at most 1 MiB of flash;
- the tensor arena TFLM's recording allocator reports, at most 256 KiB;
- accuracy on the 25,000 test reviews, read from TFLM's outputs.
"""

import argparse
import json
import os
import sys
import tempfile
import time

import imdb_classification as base
import imdb_edge
import keras
import numpy as np

from keras_attn import export
from keras_attn.export import edge_targets as edge
from keras_attn_runtime import LiteRTClassifier

BOUNDS = {"size_bytes": 1 << 20, "arena_bytes": 256 << 10}

"""
## A smaller model

The edge model spends 3.9 million int8 weights on 20,000 words and
100,000 hashed word pairs, 32 wide. Here 10,000 words and 25,000 pair
bins, 24 wide, hold 0.87 million; the rest (the two-level
`StructuredSelfAttention` pooling, the classifier) is the edge model's.
Among four sizes tried on validation reviews carved from the training
set, this one scored best within the flash budget (docs/edge.md).
"""

HPARAMS = {
    **imdb_edge.HPARAMS,
    "max_tokens": 10_000,
    "embed_dim": 24,
    "bigram_bins": 25_000,
}


def train(data, hp, verbose):
    """The model, its raw-text wrapper and the training history."""
    vectorizer = base.make_vectorizer(data["train"][0], hp)
    model = imdb_edge.build_model(vectorizer.vocabulary_size(), hp)
    train_ds = base.token_dataset(
        vectorizer, *data["train"], hp["batch_size"], hp["seed"]
    )
    val_ds = base.token_dataset(vectorizer, *data["val"], 256)
    _, history = base.train(model, train_ds, val_ds, hp, verbose)
    return model, base.text_model_of(vectorizer, model), history


"""
## Through TensorFlow Lite Micro

The file is exported full-integer as in the edge recipe, checked against
every edge target's op list (`edge_targets.check_edge_targets`), then run
review by review by TFLM's interpreter: its probabilities give the
accuracy, and its recording allocator the arena a firmware reserves.
"""


def micro_accuracy(path, texts, labels):
    """Accuracy of `path` run by TFLM, and its probabilities."""
    ids = LiteRTClassifier(path).tokenizer(list(texts))
    probs = edge.MicroModel(path).run(ids)["probability"][:, 0]
    return float(np.mean((probs > 0.5) == (labels > 0.5))), probs


def export_micro(text_model, data, hp, path):
    calibration = imdb_edge.calibration_texts(data, hp)
    export.export_text_model(
        text_model,
        tflite=path,
        quantize="int8",
        calibration_texts=calibration,
        verbose=sys.stdout.isatty(),  # a progress bar on a terminal
    )
    edge.check_edge_targets(path, sorted(edge.TARGETS))


def check_bounds(metrics):
    """Raise if the file or the arena is over its bound."""
    over = {
        name: metrics[name]
        for name, bound in BOUNDS.items()
        if metrics[name] > bound
    }
    if over:
        raise RuntimeError(f"Over the microcontroller bounds {BOUNDS}: {over}")


def main(out=None, limit=None, evaluate_test=True, verbose=2, **overrides):
    """Train, export, measure through TFLM; files go to `out/imdb_micro`
    (a temporary folder, removed afterwards, without `out`)."""
    hp = {**HPARAMS, **overrides}
    keras.utils.set_random_seed(hp["seed"])
    data = base.load_imdb(limit, hp["val_fraction"], hp["seed"])
    start = time.time()
    model, text_model, history = train(data, hp, verbose)
    wall = time.time() - start
    split = "test" if evaluate_test else "val"
    texts = [t.decode() for t in data[split][0]]
    with tempfile.TemporaryDirectory() as scratch:
        folder = os.path.join(out or scratch, "imdb_micro")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "model_int8.tflite")
        export_micro(text_model, data, hp, path)
        acc, probs = micro_accuracy(path, texts, data[split][1])
        targets = imdb_edge.edge_targets(path, texts)
        metrics = {
            "model": "microcontroller: word and word-pair embeddings, "
            "two-level StructuredSelfAttention, full-integer int8",
            "versions": export.versions(),
            "hyperparameters": hp,
            "params": model.count_params(),
            "train_wall_time_s": round(wall, 1),
            "history": {
                k: [round(float(v), 5) for v in vs] for k, vs in history.items()
            },
            "val_accuracy_keras": base.accuracy(text_model, *data["val"]),
            f"{split}_accuracy_keras": base.accuracy(text_model, *data[split]),
            f"{split}_accuracy_tflm": acc,
            f"{split}_reviews": len(texts),
            "size_bytes": os.path.getsize(path),
            "arena_bytes": targets["tflm"]["arena_bytes"],
            "bounds": BOUNDS,
            "edge_targets": targets,
        }
        check_bounds(metrics)
        print(json.dumps(metrics, indent=2))
        if out:
            metrics["command"] = "python recipes/imdb_micro.py --out DIR"
            with open(os.path.join(folder, "metrics.json"), "w") as f:
                json.dump(metrics, f, indent=2)
    return metrics


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--out", help="write OUT/imdb_micro/")
    parser.add_argument("--limit", type=int, help="use only this many reviews")
    parser.add_argument("--epochs", type=int, default=HPARAMS["epochs"])
    parser.add_argument("--no-test", action="store_true", help="no test set")
    args = parser.parse_args()
    main(args.out, args.limit, not args.no_test, epochs=args.epochs)
