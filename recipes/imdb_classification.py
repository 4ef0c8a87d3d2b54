"""
Title: Sentiment classification with structured self-attention
Author: keras_attn contributors
Description: Lin et al.'s self-attentive sentence embedding on IMDB, from
raw text to an exported model whose attention you can read.

Run it: `python recipes/imdb_classification.py --out saved_models`
(about ten minutes on two CPU cores; `--limit 2000 --epochs 1` for a
quick look). Results: docs/results.md.
"""

"""
## Introduction

A review is read by a bidirectional LSTM; instead of keeping its last
state, a `StructuredSelfAttention` layer (Lin et al., 2017,
https://arxiv.org/abs/1703.03130) takes `r` weighted averages of all the
LSTM states, each "hop" free to look at different words. Its penalty
`‖AAᵀ − I‖²_F` pushes the hops apart. The weights `A` come out of the model
next to the prediction, so every verdict can be explained.
"""

import argparse
import json
import os
import time

import keras
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from keras_attn import StructuredSelfAttention, explain, standardize_review
from keras_attn.export import export_saved_model, versions

# The shipped `saved_models/imdb_ssa` (chosen on validation: docs/results.md).
HPARAMS = {
    "max_tokens": 10_000,  # vocabulary size
    "length": 500,  # tokens kept per review
    "embed_dim": 64,
    "lstm_units": 64,
    "attention_units": 64,  # d_a in the paper
    "num_hops": 8,  # r in the paper
    "penalty": 0.1,
    "dropout": 0.5,
    "word_dropout": 0.3,
    "learning_rate": 5e-4,
    "weight_decay": 0.01,
    "batch_size": 64,
    "epochs": 4,
    "patience": 1,
    "val_fraction": 0.1,
    "seed": 1337,
}

"""
## Load the data

`tensorflow-datasets` reads IMDB from `$TFDS_DATA_DIR` (an offline copy
works). The 25,000 training reviews give a validation split, drawn with a
fixed seed; every choice is made on it. The 25,000 test reviews are used
once, at the end.
"""


def check_imdb_is_here():
    """Without a prepared copy, `tfds.load` would try to download IMDB
    and, on a machine without a network, retry for minutes: say what to
    do instead, at once."""
    builder = tfds.builder("imdb_reviews")
    if not builder.is_prepared():
        raise SystemExit(
            f"IMDB is not prepared in {builder.data_dir}. Set TFDS_DATA_DIR "
            "to an offline copy, or download it once with "
            "`tfds build imdb_reviews`."
        )


def load_imdb(limit=None, val_fraction=0.1, seed=1337):
    """`{"train", "val", "test"}`: (texts, labels); `limit`: random subsets."""
    check_imdb_is_here()
    (x, y), (test_x, test_y) = (
        tfds.as_numpy(
            tfds.load(
                "imdb_reviews", split=s, batch_size=-1, as_supervised=True
            )
        )
        for s in ("train", "test")
    )
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(x))[:limit]
    val, train = np.split(order, [int(len(order) * val_fraction)])
    test = rng.permutation(len(test_x))[:limit] if limit else slice(None)
    return {
        "train": (x[train], y[train].astype("float32")),
        "val": (x[val], y[val].astype("float32")),
        "test": (test_x[test], test_y[test].astype("float32")),
    }


"""
## Turn text into token ids

`TextVectorization` with `keras_attn.standardize_review` lowercases, drops
HTML tags such as `<br />` and keeps `!`/`?` as words. Index 0 is padding,
so `Embedding(mask_zero=True)` masks it and the attention never looks at
it. The same tokenization runs without TensorFlow in
`keras_attn_runtime` for the exported LiteRT model.
"""


def make_vectorizer(texts, hp):
    vectorizer = keras.layers.TextVectorization(
        max_tokens=hp["max_tokens"],
        standardize=standardize_review,
        output_sequence_length=hp["length"],
        name="vectorizer",
    )
    vectorizer.adapt(texts, batch_size=1024)
    return vectorizer


def token_dataset(vectorizer, texts, labels, batch_size, seed=None):
    """Batches of (token ids, label), shuffled when a seed is given."""
    ds = tf.data.Dataset.from_tensor_slices((texts, labels))
    ds = ds.shuffle(len(texts), seed=seed) if seed is not None else ds
    ds = ds.batch(batch_size).map(lambda x, y: (vectorizer(x), y), -1)
    return (ds if seed is not None else ds.cache()).prefetch(-1)


"""
## Build the model

Embedding → word dropout → BiLSTM → `StructuredSelfAttention` → MLP. Word
dropout removes whole words (one draw per position) so that the model
cannot lean on a single one. The padding mask is computed from the token
ids and handed to the BiLSTM and to the attention by name: the model does
not count on each layer in between passing Keras's implicit mask along
(Keras 3.16's nightly builds stopped doing so for RNN layers). The model
returns a dict: the probability and the attention `A` of shape
`(batch, hops, length)`.
"""


def build_model(vocab_size, hp):
    tokens = keras.Input((hp["length"],), dtype="int64", name="tokens")
    x = keras.layers.Embedding(vocab_size, hp["embed_dim"], mask_zero=True)(
        tokens
    )
    x = keras.layers.SpatialDropout1D(hp["dropout"] / 2)(x)
    x = keras.layers.Dropout(hp["word_dropout"], noise_shape=(None, None, 1))(x)
    mask = keras.ops.not_equal(tokens, 0)  # (B, T): True on words
    x = keras.layers.Bidirectional(
        keras.layers.LSTM(hp["lstm_units"], return_sequences=True)
    )(x, mask=mask)
    ssa = StructuredSelfAttention(
        hp["attention_units"],
        hp["num_hops"],
        hp["penalty"],
        name="structured_self_attention",
    )
    m, a = ssa(
        x, mask=mask, return_attention_scores=True
    )  # (B, r, 2·lstm), (B, r, T)
    x = keras.layers.Flatten()(m)
    x = keras.layers.Dropout(hp["dropout"])(x)
    x = keras.layers.Dense(128, activation="relu")(x)
    x = keras.layers.Dropout(hp["dropout"])(x)
    prob = keras.layers.Dense(1, activation="sigmoid", name="probability")(x)
    return keras.Model(
        tokens, {"probability": prob, "attention": a}, name="imdb_ssa"
    )


"""
## Train

We train a single-output view of the model (the same layers), so that
Keras reports accuracy for the probability; the attention penalty joins the
loss through `add_loss`. Early stopping watches validation accuracy and
keeps the best epoch's weights.
"""


def train(model, train_ds, val_ds, hp, verbose=2):
    """Returns the training time (s) and the history."""
    trainer = keras.Model(model.input, model.output["probability"])
    optimizer = keras.optimizers.AdamW(
        hp["learning_rate"], weight_decay=hp["weight_decay"], clipnorm=1.0
    )
    trainer.compile(optimizer, "binary_crossentropy", metrics=["accuracy"])
    stop = keras.callbacks.EarlyStopping(
        "val_accuracy", patience=hp["patience"], restore_best_weights=True
    )  # mode "max", from the metric's name
    start = time.time()
    history = trainer.fit(
        train_ds,
        epochs=hp["epochs"],
        validation_data=val_ds,
        callbacks=[stop],
        verbose=verbose,
    )
    return time.time() - start, history.history


"""
## Evaluate and look inside

A text model takes raw strings: the vectorizer in front of the token model.
`keras-attn explain` draws its attention; here we print the words each
review attended to most.
"""


def text_model_of(vectorizer, model):
    text = keras.Input((), dtype="string", name="text")
    return keras.Model(text, model(vectorizer(text)), name="imdb_ssa_text")


def accuracy(text_model, texts, labels):
    batches = tf.data.Dataset.from_tensor_slices(texts).batch(256)
    out = text_model.predict(batches, verbose=0)
    return float(np.mean((out["probability"][:, 0] > 0.5) == (labels > 0.5)))


def show_attention(text_model, texts):
    texts = [t.decode() if isinstance(t, bytes) else t for t in texts]
    for result in explain.attend(text_model, texts):
        words = ", ".join(w for w, _ in explain.top_tokens(result, 6))
        print(f"P(positive) {result['probability']:.3f}: {words}")


"""
## Save and export

The `.keras` file reloads with `keras.models.load_model` after
`import keras_attn`. The SavedModel takes raw strings (TF Serving), and
runs where `keras_attn` is not installed. `recipes/imdb_export.py` adds
the LiteRT files.
"""


def main(out=None, limit=None, evaluate_test=True, verbose=2, **overrides):
    """Train, evaluate, save; `overrides` replace `HPARAMS` entries."""
    hp = {**HPARAMS, **overrides}
    keras.utils.set_random_seed(hp["seed"])
    data = load_imdb(limit, hp["val_fraction"], hp["seed"])
    start = time.time()
    vectorizer = make_vectorizer(data["train"][0], hp)
    train_ds = token_dataset(
        vectorizer, *data["train"], hp["batch_size"], hp["seed"]
    )
    val_ds = token_dataset(vectorizer, *data["val"], 256)
    model = build_model(vectorizer.vocabulary_size(), hp)
    _, history = train(model, train_ds, val_ds, hp, verbose)
    text_model = text_model_of(vectorizer, model)
    metrics = {
        "model": "ssa",
        "data": "tfds imdb_reviews/plain_text/1.0.0",
        "split": {k: len(v[0]) for k, v in data.items()},
        "hyperparameters": hp,
        "history": {k: [round(v, 5) for v in vs] for k, vs in history.items()},
        "train_wall_time_s": round(time.time() - start, 1),
        "params": model.count_params(),
        "versions": versions(),
    }
    for split in ("val", "test") if evaluate_test else ("val",):
        metrics[f"{split}_accuracy"] = accuracy(text_model, *data[split])
    print({k: v for k, v in metrics.items() if "accuracy" in k or "wall" in k})
    show_attention(text_model, data["val"][0][:3])
    if out:
        folder = os.path.join(out, "imdb_ssa")
        os.makedirs(folder, exist_ok=True)
        text_model.save(os.path.join(folder, "model.keras"))
        export_saved_model(text_model, os.path.join(folder, "saved_model"))
        with open(os.path.join(folder, "metrics.json"), "w") as f:
            json.dump(metrics, f, indent=2)
    return metrics


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--out", help="write OUT/imdb_ssa/")
    parser.add_argument("--limit", type=int, help="use only this many reviews")
    parser.add_argument("--epochs", type=int, default=HPARAMS["epochs"])
    parser.add_argument("--no-test", action="store_true", help="no test set")
    args = parser.parse_args()
    main(args.out, args.limit, not args.no_test, epochs=args.epochs)
