"""
Title: A Transformer sentiment classifier: rotary positions, grouped heads
Author: keras_attn contributors
Description: IMDB reviews classified by two Transformer blocks built from
`MultiHeadPositional`: rotary positions, grouped-query heads and the layer's
own feed-forward, then the attention read back from the trained model.

Run it: `python examples/imdb_transformer.py` (about five minutes on two
CPU cores with the defaults: 5,000 training reviews, two epochs).
`--limit 0` trains on all 25,000 reviews.
"""

"""
## Introduction

`keras_attn.MultiHeadPositional` is Keras's `MultiHeadAttention` with
what a Transformer block needs around it, set by arguments:

- `position="rotary"` rotates each head's queries and keys by their
  positions (Su et al. 2021), so scores depend on how far apart two words
  are; no position embedding is added to the inputs.
- `num_key_value_heads=2` with `num_heads=4` gives grouped-query attention
  (Ainslie et al. 2023): two key/value heads, each shared by two query
  heads; the key and value projections are half the size.
- `feed_forward="concat"` applies `g(z) = W₂ relu(W₁ z + b₁) + b₂` to the
  heads' concatenated outputs before the output projection.

Masks come from `Embedding(mask_zero=True)`: padding never receives
attention, and padded positions give exact zeros.
"""

import argparse
import os
import tempfile

import keras
import numpy as np
import tensorflow_datasets as tfds

from keras_attn import MultiHeadPositional, standardize_review

"""
## The data

`tensorflow-datasets` reads IMDB from `$TFDS_DATA_DIR` (set it to an
offline copy to run without a network). We keep `--limit` training
reviews and as many test reviews.
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


def load(limit, seed=0):
    check_imdb_is_here()

    def split(name):
        texts, labels = tfds.as_numpy(
            tfds.load(
                "imdb_reviews", split=name, batch_size=-1, as_supervised=True
            )
        )
        order = np.random.default_rng(seed).permutation(len(texts))
        order = order[:limit] if limit else order
        return texts[order], labels[order].astype("float32")

    return split("train"), split("test")


"""
## The model

Each block is pre-norm: `x + attention(norm(x))`. The layer's mask
arguments are passed explicitly, because `+` between Keras tensors drops
Keras masks. Mean pooling over the words (masked) feeds the classifier.
"""


def build_model(vocab_size, length, width=64, heads=4, blocks=2):
    """The classifier, and a model sharing its first layers that returns
    the first block's attention weights `(batch, heads, T, T)`."""
    tokens = keras.Input((length,), dtype="int64", name="tokens")
    embedding = keras.layers.Embedding(vocab_size, width, mask_zero=True)
    norms = [keras.layers.LayerNormalization() for _ in range(blocks)]
    attentions = [
        MultiHeadPositional(
            num_heads=heads,
            key_dim=width // heads,
            position="rotary",
            num_key_value_heads=2,
            feed_forward="concat",
            feed_forward_dim=2 * width,
            dropout=0.1,
        )
        for _ in range(blocks)
    ]
    mask = keras.ops.not_equal(tokens, 0)
    x = embedding(tokens)
    for i, (norm, attention) in enumerate(zip(norms, attentions, strict=True)):
        if i == 0:  # keep the first block's weights for reading later
            h, scores = attention(
                norm(x), query_mask=mask, return_attention_scores=True
            )
        else:
            h = attention(norm(x), query_mask=mask)
        x = x + h
    x = keras.layers.LayerNormalization()(x)
    x = keras.layers.GlobalAveragePooling1D()(x, mask=mask)
    x = keras.layers.Dropout(0.2)(x)
    prob = keras.layers.Dense(1, activation="sigmoid", name="probability")(x)
    model = keras.Model(tokens, prob, name="imdb_transformer")
    return model, keras.Model(tokens, scores, name="first_block_attention")


"""
## Train and evaluate
"""


def main(limit=5000, epochs=2, length=256, max_tokens=20000, verbose=2):
    keras.utils.set_random_seed(1337)
    (train_x, train_y), (test_x, test_y) = load(limit)
    vectorizer = keras.layers.TextVectorization(
        max_tokens=max_tokens,
        standardize=standardize_review,
        output_sequence_length=length,
    )
    vectorizer.adapt(train_x, batch_size=1024)
    train_ids = vectorizer(train_x).numpy()
    test_ids = vectorizer(test_x).numpy()
    model, reader = build_model(vectorizer.vocabulary_size(), length)
    model.compile(
        keras.optimizers.Adam(1e-3),
        loss="binary_crossentropy",
        metrics=["accuracy"],
    )
    model.fit(
        train_ids,
        train_y,
        batch_size=32,
        epochs=epochs,
        validation_split=0.1,
        verbose=verbose,
    )
    _, test_accuracy = model.evaluate(test_ids, test_y, verbose=0)
    print(f"test accuracy on {len(test_y)} reviews: {test_accuracy:.3f}")

    """
    ## Read the attention

    The same layers called with `return_attention_scores=True` give each
    head's weights `(batch, heads, queries, keys)`. Averaged over heads and
    queries, they say which words the first block read most in a review.
    """
    weights = reader.predict(test_ids[:1], verbose=0)[0]  # (H, T, T)
    words = vectorizer.get_vocabulary()
    ids = test_ids[0]
    read = weights.mean(axis=(0, 1))[: int((ids != 0).sum())]
    top = np.argsort(read)[::-1][:8]
    print("most read:", ", ".join(words[ids[i]] for i in top))

    """
    ## Save and reload

    The layer's arguments (positions, heads, feed-forward) are in its
    config: the `.keras` file reloads without custom objects.
    """
    with tempfile.TemporaryDirectory() as folder:  # removed afterwards
        path = os.path.join(folder, "imdb_transformer.keras")
        model.save(path)
        again = keras.saving.load_model(path)
        same = np.allclose(
            model.predict(test_ids[:64], verbose=0),
            again.predict(test_ids[:64], verbose=0),
            atol=1e-6,
        )
        print(f"reloaded from a .keras file: same predictions: {same}")
    return {"test_accuracy": test_accuracy, "reloads": bool(same)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument(
        "--limit", type=int, default=5000, help="reviews per split; 0: all"
    )
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--length", type=int, default=256, help="tokens kept")
    main(**vars(parser.parse_args()))
