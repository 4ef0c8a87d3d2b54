"""
Title: Length extrapolation of four position schemes
Author: keras_attn contributors
Description: Small causal Transformers from `MultiHeadPositional`,
trained on 128-token sequences of a copy task and evaluated on 128- and
512-token ones, with sinusoidal, learned, rotary and ALiBi positions.

Run it: `python examples/length_extrapolation.py` (a few minutes on two
CPU cores; `--steps 50` for a quick look). Results: docs/results.md.
"""

"""
## The task

Random tokens `x_1 … x_T` from 30 symbols; at every step `t > lag` the
model predicts `x_{t − lag}`, the token `lag` steps back (a copy at a
fixed distance: it needs relative position, not content). Accuracy is
over those steps. Training sees 128 tokens only; at 512 tokens a model
meets positions (and, for learned positions, table rows) it never
trained on.
"""

import argparse
import json
import time

import keras
import numpy as np
from keras import ops

from keras_attn import MultiHeadPositional

HPARAMS = {
    "vocab": 32,  # ids 2..31 are symbols
    "lag": 4,
    "train_length": 128,
    "eval_lengths": [128, 512],
    "width": 64,
    "heads": 4,
    "layers": 2,
    "steps": 600,
    "batch_size": 32,
    "learning_rate": 3e-3,
    "eval_sequences": 256,
    "seed": 0,
}


def batch(rng, size, length, hp):
    x = rng.integers(2, hp["vocab"], size=(size, length)).astype("int32")
    y = np.roll(x, hp["lag"], axis=1)
    weight = np.ones((size, length), "float32")
    weight[:, : hp["lag"]] = 0.0
    return x, y, weight


"""
## The model

Each block is pre-norm causal self-attention with a residual; positions
live inside `MultiHeadPositional` (added to its inputs for sinusoidal and
learned, rotating queries and keys for rotary, biasing scores for ALiBi).
The learned table has 512 rows, of which training reaches the first 128.
"""


def build(position, hp):
    tokens = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(hp["vocab"], hp["width"])(tokens)
    for _ in range(hp["layers"]):
        h = keras.layers.LayerNormalization()(x)
        h = MultiHeadPositional(
            hp["heads"],
            hp["width"] // hp["heads"],
            position=position,
            max_length=max(hp["eval_lengths"]),
        )(h, use_causal_mask=True)
        x = keras.layers.Add()([x, h])
    logits = keras.layers.Dense(hp["vocab"])(
        keras.layers.LayerNormalization()(x)
    )
    return keras.Model(tokens, logits)


def run(position, hp):
    keras.utils.set_random_seed(hp["seed"])
    rng = np.random.default_rng(hp["seed"])
    model = build(position, hp)
    model.compile(
        keras.optimizers.Adam(hp["learning_rate"]),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    start = time.time()
    for _ in range(hp["steps"]):
        x, y, w = batch(rng, hp["batch_size"], hp["train_length"], hp)
        model.train_on_batch(x, y, sample_weight=w)
    seconds = time.time() - start
    scores = {}
    for length in hp["eval_lengths"]:
        x, y, w = batch(
            np.random.default_rng(99), hp["eval_sequences"], length, hp
        )
        pred = ops.convert_to_numpy(ops.argmax(model.predict(x, verbose=0), -1))
        scores[length] = float(((pred == y) * w).sum() / w.sum())
    return {"accuracy": scores, "train_seconds": round(seconds, 1)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--steps", type=int, default=HPARAMS["steps"])
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    hp = {**HPARAMS, "steps": args.steps}
    results = {"hyperparameters": hp, "runs": {}}
    for position in ("sinusoidal", "learned", "rotary", "alibi"):
        results["runs"][position] = run(position, hp)
        print(position, results["runs"][position], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
