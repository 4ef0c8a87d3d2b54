"""
Title: A MultiHeadPositional encoder against Keras's MultiHeadAttention
Author: keras_attn contributors
Description: The same two-block Transformer encoder on IMDB, built once
from `keras_attn` layers and once from Keras built-ins, trained on the same
data in the same run.

Run it: `python recipes/imdb_mhp.py` (`--limit 2000 --epochs 1` for a
quick look). Results: docs/results.md.
"""

"""
## Setup

The data, vectorizer and training loop are the ones of
`imdb_classification.py`; only the encoder changes.
"""

import argparse
import json

import imdb_classification as base

HPARAMS = {
    **base.HPARAMS,
    "max_tokens": 30_000,
    "length": 400,
    "embed_dim": 128,
    "dropout": 0.3,
    "word_dropout": 0.0,
    "learning_rate": 2e-3,
    "weight_decay": 0.0,
}

"""
## Two encoders

Ours: embeddings scaled by `√d` plus `SinusoidalPositionEncoding` (without
the scale the sines drown the words), two blocks of `MultiHeadPositional`
with residual connections and layer normalization, pooled by
`StructuredSelfAttention`, whose weights explain the verdict. Keras's: the
same blocks with `keras.layers.MultiHeadAttention`, a learned position
embedding and average pooling.
"""


def block(x, hp, ours, mask):
    import keras

    from keras_attn import MultiHeadPositional

    width = hp["embed_dim"]
    if ours:  # positions were added once, below the blocks
        attention = MultiHeadPositional(
            4, width // 4, position=None, dropout=0.1
        )(x, query_mask=mask, value_mask=mask)
    else:
        attention = keras.layers.MultiHeadAttention(4, width // 4, dropout=0.1)(
            x, x, query_mask=mask, value_mask=mask
        )
    # `Add` layers, not `+`: they carry the padding mask along.
    drop = keras.layers.Dropout(hp["dropout"])
    x = keras.layers.LayerNormalization()(
        keras.layers.Add()([x, drop(attention)])
    )
    ff = keras.layers.Dense(2 * width, activation="relu")(x)
    ff = keras.layers.Dense(width)(ff)
    return keras.layers.LayerNormalization()(keras.layers.Add()([x, drop(ff)]))


def build_model(vocab_size, hp, ours=True):
    import keras

    import keras_attn

    tokens = keras.Input((hp["length"],), dtype="int64", name="tokens")
    mask = keras.ops.not_equal(tokens, 0)  # (B, T), handed on by name
    x = keras.layers.Embedding(vocab_size, hp["embed_dim"], mask_zero=True)(
        tokens
    )
    if ours:
        scaled = keras.layers.Rescaling(hp["embed_dim"] ** 0.5)(x)
        positions = keras_attn.SinusoidalPositionEncoding()(x)
        x = keras.layers.Add()([scaled, positions])
    else:
        positions = keras.ops.arange(hp["length"])[None]  # (1, T)
        learned = keras.layers.Embedding(hp["length"], hp["embed_dim"])
        x = keras.layers.Add()([x, learned(positions)])
    x = keras.layers.Dropout(hp["dropout"] / 2)(x)
    for _ in range(2):
        x = block(x, hp, ours, mask)
    outputs = {}
    if ours:
        m, outputs["attention"] = keras_attn.StructuredSelfAttention(
            hp["attention_units"], hp["num_hops"], hp["penalty"]
        )(x, mask=mask, return_attention_scores=True)
        x = keras.layers.Flatten()(m)
    else:
        x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dropout(hp["dropout"])(x)
    x = keras.layers.Dense(128, activation="relu")(x)
    outputs["probability"] = keras.layers.Dense(
        1, activation="sigmoid", name="probability"
    )(keras.layers.Dropout(hp["dropout"])(x))
    return keras.Model(tokens, outputs)


"""
## Train both and compare

Same seed, same batches, same optimizer; validation accuracy decides the
epoch, and test accuracy is read once per model.
"""


def main(limit=None, evaluate_test=True, verbose=2, **overrides):
    import keras

    hp = {**HPARAMS, **overrides}
    data = base.load_imdb(limit, hp["val_fraction"], hp["seed"])
    vectorizer = base.make_vectorizer(data["train"][0], hp)
    train_ds = base.token_dataset(
        vectorizer, *data["train"], hp["batch_size"], hp["seed"]
    )
    val_ds = base.token_dataset(vectorizer, *data["val"], 256)
    rows = {}
    for name, ours in (("MultiHeadPositional", True), ("keras MHA", False)):
        keras.utils.set_random_seed(hp["seed"])
        model = build_model(vectorizer.vocabulary_size(), hp, ours)
        wall, _ = base.train(model, train_ds, val_ds, hp, verbose)
        text_model = base.text_model_of(vectorizer, model)
        rows[name] = {
            "val_accuracy": base.accuracy(text_model, *data["val"]),
            "train_wall_time_s": round(wall, 1),
            "params": model.count_params(),
        }
        if evaluate_test:
            rows[name]["test_accuracy"] = base.accuracy(
                text_model, *data["test"]
            )
    print(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--limit", type=int, help="use only this many reviews")
    parser.add_argument("--epochs", type=int, default=HPARAMS["epochs"])
    parser.add_argument("--no-test", action="store_true")
    args = parser.parse_args()
    main(args.limit, not args.no_test, epochs=args.epochs)
