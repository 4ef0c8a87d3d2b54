"""
Title: Self-attentive sentence embeddings for sentiment
Author: keras_attn contributors
Description: A bidirectional LSTM pooled by `StructuredSelfAttention`
(Lin et al. 2017) on IMDB, the hops' penalty at work, and each hop's
favourite words read from the trained model.

Run it: `python examples/imdb_self_attention.py` (about five minutes on two
CPU cores with the defaults: 5,000 training reviews, two epochs).
`--limit 0` trains on all 25,000 reviews. The tuned pipeline behind the
shipped `imdb_ssa` model is `recipes/imdb_classification.py`.
"""

"""
## Introduction

A sentence embedding from a recurrent encoder is usually its last state,
or an average. Lin et al. (2017, https://arxiv.org/abs/1703.03130) take
`r` weighted averages instead, each over all time steps, with weights

    A = softmax(W_s2 tanh(W_s1 Hᵀ))        # (r, T), softmax over T

and add the penalty `‖AAᵀ − I‖²_F`, which is zero only when the `r` hops
put their weight on different words. `StructuredSelfAttention` computes
`M = AH` `(r, 2u)` and adds the penalty through `add_loss`, so
`model.fit` minimizes it with the task's loss.
"""

import argparse
import os
import tempfile

import keras
import numpy as np
import tensorflow_datasets as tfds

from keras_attn import StructuredSelfAttention, standardize_review

"""
## The data

`tensorflow-datasets` reads IMDB from `$TFDS_DATA_DIR` (set it to an
offline copy to run without a network). We keep `--limit` reviews of each
split.
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

Index 0 is padding. The mask computed from the token ids goes to the LSTM
and to the attention by name, so padded steps get a weight of exactly
zero whether or not the layers in between pass Keras's implicit mask on.
The model has two outputs: the probability, and the hops' weights `A`
`(batch, r, T)`.
"""


def build_model(vocab_size, length, hops=4, penalty=0.1):
    tokens = keras.Input((length,), dtype="int64", name="tokens")
    mask = keras.ops.not_equal(tokens, 0)  # (B, T): True on words
    x = keras.layers.Embedding(vocab_size, 64, mask_zero=True)(tokens)
    x = keras.layers.Bidirectional(
        keras.layers.LSTM(32, return_sequences=True)
    )(x, mask=mask)
    attention = StructuredSelfAttention(
        units=32, num_hops=hops, penalty_coefficient=penalty
    )
    m, weights = attention(x, mask=mask, return_attention_scores=True)
    x = keras.layers.Flatten()(m)  # the r hops side by side
    x = keras.layers.Dropout(0.3)(x)
    prob = keras.layers.Dense(1, activation="sigmoid", name="probability")(x)
    return keras.Model(tokens, {"probability": prob, "attention": weights})


"""
## Train

A view of the model with the probability as its one output trains it
(the same layers, so the same weights). The penalty is in its `losses`,
added to the loss at every step.
"""


def main(limit=5000, epochs=2, length=256, hops=4, penalty=0.1, verbose=2):
    keras.utils.set_random_seed(1337)
    (train_x, train_y), (test_x, test_y) = load(limit)
    vectorizer = keras.layers.TextVectorization(
        max_tokens=20000,
        standardize=standardize_review,
        output_sequence_length=length,
    )
    vectorizer.adapt(train_x, batch_size=1024)
    train_ids = vectorizer(train_x).numpy()
    test_ids = vectorizer(test_x).numpy()
    model = build_model(vectorizer.vocabulary_size(), length, hops, penalty)
    trainer = keras.Model(model.input, model.output["probability"])
    trainer.compile(
        keras.optimizers.Adam(1e-3),
        loss="binary_crossentropy",
        metrics=["accuracy"],
    )
    trainer.fit(
        train_ids,
        train_y,
        batch_size=32,
        epochs=epochs,
        validation_split=0.1,
        verbose=verbose,
    )
    predicted = model.predict(test_ids, verbose=0)
    hits = (predicted["probability"][:, 0] > 0.5) == (test_y > 0.5)
    print(f"test accuracy on {len(test_y)} reviews: {hits.mean():.3f}")

    """
    ## How far apart are the hops?

    `AAᵀ` of one review: its diagonal is each hop's self-overlap, the rest
    how much two hops share. The penalty drove the off-diagonal mass down.
    """
    a = predicted["attention"][0]  # (r, T)
    overlap = a @ a.T
    shared = overlap.sum() - np.trace(overlap)
    print(f"off-diagonal mass of AAᵀ on the first test review: {shared:.3f}")
    penalty_value = ((overlap - np.eye(len(a))) ** 2).sum()
    print(f"its ‖AAᵀ − I‖²_F: {penalty_value:.3f}")

    """
    ## What each hop reads

    The words with the largest weight in each hop of the first test review.
    """
    words, ids = vectorizer.get_vocabulary(), test_ids[0]
    for hop, row in enumerate(a):
        top = np.argsort(row)[::-1][:5]
        print(f"hop {hop}:", ", ".join(words[ids[i]] for i in top))

    """
    ## Save and reload

    The layer is registered with Keras: the `.keras` file reloads without
    custom objects and gives the same weights `A`.
    """
    with tempfile.TemporaryDirectory() as folder:  # removed afterwards
        path = os.path.join(folder, "imdb_self_attention.keras")
        model.save(path)
        again = keras.saving.load_model(path).predict(test_ids[:64], verbose=0)
        same = np.allclose(
            again["attention"], predicted["attention"][:64], atol=1e-6
        )
        print(f"reloaded from a .keras file: same attention: {same}")
    return {
        "test_accuracy": float(hits.mean()),
        "offdiagonal_mass": float(shared),
        "reloads": bool(same),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument(
        "--limit", type=int, default=5000, help="reviews per split; 0: all"
    )
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--length", type=int, default=256, help="tokens kept")
    parser.add_argument("--hops", type=int, default=4, help="r in the paper")
    parser.add_argument(
        "--penalty", type=float, default=0.1, help="weight of ‖AAᵀ − I‖²_F"
    )
    main(**vars(parser.parse_args()))
