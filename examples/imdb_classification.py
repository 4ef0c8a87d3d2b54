"""IMDB sentiment classification with keras_attn layers.

Models (`--model`, several may be given):

- `ssa`: the paper's architecture (Lin et al. 2017): Embedding → BiLSTM →
  StructuredSelfAttention (with the ‖AAᵀ − I‖² penalty) → MLP → sigmoid.
- `mhp`: an encoder of MultiHeadPositional blocks (residual + LayerNorm),
  pooled by StructuredSelfAttention.
- `baseline`: the same encoder from Keras built-ins only
  (`keras.layers.MultiHeadAttention`, average pooling), trained on the same
  data in the same run, so every accuracy has its comparison beside it.
- `bigram`: a linear model on naive-Bayes-weighted unigram+bigram features
  (Wang & Manning 2012), used as the second member of `ensemble`.
- `ensemble`: the average of the `ssa` and `bigram` logits, the weight
  chosen on validation.

Data: `tfds.load("imdb_reviews")` (set `TFDS_DATA_DIR` for a local copy).
Hyperparameters are chosen on a validation split carved from `train` with a
fixed seed; `test` is evaluated once per shipped model.

Run: `python examples/imdb_classification.py --model ssa --out saved_models`
"""

import argparse
import contextlib
import json
import os
import platform
import sys
import time

import numpy as np

OUTPUT_NAMES = ("probability", "attention")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--model",
        nargs="+",
        default=["ssa"],
        choices=["ssa", "mhp", "baseline", "bigram", "ensemble"],
    )
    p.add_argument(
        "--ssa-model",
        default=None,
        help="a trained ssa text model (.keras) to use instead of training "
        "one (e.g. saved_models/imdb_ssa/model.keras for the ensemble)",
    )
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=30000)
    p.add_argument("--length", type=int, default=400)
    p.add_argument("--embed-dim", type=int, default=128)
    p.add_argument("--lstm-units", type=int, default=64)
    p.add_argument("--attention-units", type=int, default=64)
    p.add_argument("--num-hops", type=int, default=8)
    p.add_argument("--penalty", type=float, default=0.1)
    p.add_argument("--dropout", type=float, default=0.3)
    p.add_argument(
        "--word-dropout",
        type=float,
        default=0.0,
        help="ssa: drop whole word vectors with this rate while training",
    )
    p.add_argument("--learning-rate", type=float, default=2e-3)
    p.add_argument(
        "--weight-decay",
        type=float,
        default=0.0,
        help="AdamW decoupled weight decay (0: plain Adam)",
    )
    p.add_argument(
        "--bigram-embed",
        type=int,
        default=0,
        help="ssa: add a learned vector for each (word, next word) pair, "
        "hashed into this many buckets (0: off)",
    )
    p.add_argument("--bigram-tokens", type=int, default=200000)
    p.add_argument(
        "--ngrams",
        type=int,
        default=2,
        help="n-gram order of the NB-weighted linear model (1..n-grams)",
    )
    p.add_argument(
        "--nb-scale",
        type=float,
        default=0.5,
        help="initial bigram weights = scale × NB log-ratio",
    )
    p.add_argument("--bigram-epochs", type=int, default=4)
    p.add_argument("--bigram-learning-rate", type=float, default=1e-3)
    p.add_argument(
        "--bigram-dropout",
        type=float,
        default=None,
        help="input dropout of the n-gram model (default: --dropout)",
    )
    p.add_argument(
        "--bigram-weight-decay",
        type=float,
        default=0.0,
        help="AdamW weight decay of the n-gram model",
    )
    p.add_argument(
        "--bucket",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="ssa: batch reviews of similar length, each batch cut to its "
        "longest review (the same math under the mask, fewer LSTM steps)",
    )
    p.add_argument(
        "--ema",
        type=float,
        default=0.0,
        help="keep an exponential moving average of the weights with this "
        "momentum (e.g. 0.99), validate and ship it (0: off)",
    )
    p.add_argument(
        "--adversarial",
        type=float,
        default=0.0,
        help="ssa: adversarial training on the word vectors (Miyato et "
        "al. 2017) with this perturbation norm per review (0: off)",
    )
    p.add_argument(
        "--distill",
        type=float,
        default=0.0,
        help="ssa: train on (1 − w)·label + w·p_teacher, where p_teacher is "
        "the n-gram model's out-of-fold probability (--bigram-* settings, "
        "--distill-folds folds of train; 0: off)",
    )
    p.add_argument("--distill-folds", type=int, default=5)
    p.add_argument("--patience", type=int, default=1)
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        help="use only this many train and test reviews",
    )
    p.add_argument("--val-fraction", type=float, default=0.1)
    p.add_argument(
        "--val-split",
        choices=["random", "movies"],
        default="random",
        help="random reviews of train, or whole movies held out (the test "
        "split's movies are disjoint from train's; needs --imdb-archive)",
    )
    p.add_argument(
        "--imdb-archive",
        default=os.environ.get("IMDB_ARCHIVE"),
        help="aclImdb tarball, for --val-split movies (default: $IMDB_ARCHIVE)",
    )
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument(
        "--no-test",
        action="store_true",
        help="tuning runs: report validation only",
    )
    p.add_argument("--strategy", choices=["none", "mirrored"], default="none")
    p.add_argument(
        "--data-dir",
        default=None,
        help="TFDS data dir (default: $TFDS_DATA_DIR or ~)",
    )
    p.add_argument(
        "--out", default=None, help="write artifacts to OUT/imdb_<model>/"
    )
    p.add_argument("--tag", default="", help="suffix for artifact folders")
    p.add_argument("--verbose", type=int, default=2)
    return p.parse_args(argv)


# -- data ---------------------------------------------------------------
def review_ids(archive):
    """{review text: (label, id)} of the `train` reviews of an aclImdb tarball.

    In the official `aclImdb` layout (`train/pos/<id>_<rating>.txt`), the
    reviews of one movie have consecutive ids (the order of the dataset's
    `urls_pos.txt` / `urls_neg.txt`), which tfds does not keep.
    """
    import re
    import tarfile

    pattern = re.compile(r"aclImdb/train/(pos|neg)/(\d+)_\d+\.txt$")
    ids = {}
    with tarfile.open(archive) as tar:
        for member in tar:
            match = pattern.search(member.name)
            if match:
                text = tar.extractfile(member).read()
                ids[text] = (int(match.group(1) == "pos"), int(match.group(2)))
    return ids


def movie_split(train_x, train_y, archive, val_fraction):
    """Validation = the last `val_fraction` of ids in each class.

    Consecutive ids share a movie, so these reviews' movies are (but for
    the one movie at each boundary) absent from training within that
    class; a movie can still have reviews of the other class in training.
    """
    ids = review_ids(archive)
    found = [ids.get(bytes(t)) for t in train_x]
    missing = sum(f is None for f in found)
    if missing:
        raise ValueError(
            f"Expected every tfds train review in archive={archive!r}. "
            f"Received an archive missing {missing} of {len(train_x)}."
        )
    per_class = {c: 1 + max(i for (k, i) in found if k == c) for c in (0, 1)}
    in_val = np.array(
        [i >= per_class[k] * (1 - val_fraction) for (k, i) in found]
    )
    labels = np.array([k for (k, _) in found], dtype="float32")
    if not np.array_equal(labels, train_y):
        raise ValueError(
            "Expected the archive's labels to match tfds. Received "
            f"{int((labels != train_y).sum())} differing labels."
        )
    return np.flatnonzero(in_val), np.flatnonzero(~in_val)


def load_imdb(
    data_dir=None,
    limit=None,
    val_fraction=0.1,
    seed=1337,
    val_split="random",
    archive=None,
):
    """Train/validation/test arrays of (texts, labels) from tfds.

    `val_split="random"` carves a seeded random validation set from
    `train`; `"movies"` holds out whole movies (needs the aclImdb tarball,
    `archive`, for the review ids tfds drops).
    """
    if val_split not in ("random", "movies"):
        raise ValueError(
            "Expected val_split to be 'random' or 'movies'. "
            f"Received: val_split={val_split!r}"
        )
    if val_split == "movies" and not (archive and os.path.exists(archive)):
        raise ValueError(
            "val_split='movies' needs the aclImdb tarball for the review "
            f"ids. Received: archive={archive!r}"
        )
    try:
        import tensorflow_datasets as tfds

        def split(name):
            x, y = tfds.load(
                "imdb_reviews",
                split=name,
                batch_size=-1,
                as_supervised=True,
                data_dir=data_dir,
                download=True,
            )
            return x.numpy(), y.numpy().astype("float32")

        train_x, train_y = split("train")
        test_x, test_y = split("test")
    except Exception as err:  # no network and no local copy
        raise RuntimeError(
            "Could not load the IMDB reviews with tensorflow-datasets: "
            f"{type(err).__name__}: {err}\nWith no network, point "
            "TFDS_DATA_DIR (or --data-dir) at a folder holding "
            "imdb_reviews/plain_text/1.0.0."
        ) from err
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(train_x))
    if val_split == "movies":
        val, train = movie_split(train_x, train_y, archive, val_fraction)
        train = rng.permutation(train)
        if limit:
            val, train = val[: limit // 10], train[:limit]
    else:
        if limit:
            order = order[:limit]
        n_val = int(len(order) * val_fraction)
        val, train = order[:n_val], order[n_val:]
    if limit:
        keep = rng.permutation(len(test_x))[:limit]
        test_x, test_y = test_x[keep], test_y[keep]
    return {
        "train": (train_x[train], train_y[train]),
        "val": (train_x[val], train_y[val]),
        "test": (test_x, test_y),
    }


def make_vectorizer(texts, max_tokens, length):
    import keras

    from keras_attn.text import standardize_review

    vectorizer = keras.layers.TextVectorization(
        max_tokens=max_tokens,
        standardize=standardize_review,
        output_sequence_length=length,
        name="vectorizer",
    )
    vectorizer.adapt(texts, batch_size=1024)
    return vectorizer


def token_dataset(
    vectorizer, texts, labels, batch_size, shuffle_seed=None, cache=True
):
    """Batches of (vectorized text, label); shuffled when a seed is given."""
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((texts, labels))
    if shuffle_seed is not None:
        ds = ds.shuffle(
            len(texts), seed=shuffle_seed, reshuffle_each_iteration=True
        )
    ds = ds.batch(batch_size).map(
        lambda x, y: (vectorizer(x), y), num_parallel_calls=tf.data.AUTOTUNE
    )
    if cache and shuffle_seed is None:
        ds = ds.cache()
    return ds.prefetch(tf.data.AUTOTUNE)


def bucketed_dataset(
    vectorizer, texts, labels, batch_size, shuffle_seed=None, pool=50
):
    """Batches of reviews of similar length, cut to the longest in each.

    Reviews are vectorized once. Each pass shuffles them (when a seed is
    given), sorts each pool of `pool` batches by length, and shuffles the
    batches, so a batch of short reviews costs only its own length in LSTM
    steps. Padding is masked, so the model computes what it would on the
    full padded length.
    """
    import tensorflow as tf

    tokens = np.concatenate(
        [
            np.asarray(vectorizer(texts[i : i + 2048]))
            for i in range(0, len(texts), 2048)
        ]
    )  # (N, length), 0 = padding (right)
    lengths = np.maximum(1, (tokens != 0).sum(axis=1))
    labels = np.asarray(labels, dtype="float32")
    passes = [0]

    def batches():
        if shuffle_seed is None:
            order = np.argsort(lengths, kind="stable")
        else:
            rng = np.random.default_rng(shuffle_seed + passes[0])
            passes[0] += 1
            order = rng.permutation(len(tokens))
            chunk = batch_size * pool
            order = np.concatenate(
                [
                    part[np.argsort(lengths[part], kind="stable")]
                    for part in np.split(order, range(chunk, len(order), chunk))
                ]
            )
        groups = np.split(order, range(batch_size, len(order), batch_size))
        if shuffle_seed is not None:
            groups = [groups[i] for i in rng.permutation(len(groups))]
        for idx in groups:
            yield tokens[idx, : lengths[idx].max()], labels[idx]

    ds = tf.data.Dataset.from_generator(
        batches,
        output_signature=(
            tf.TensorSpec((None, None), tf.int64),
            tf.TensorSpec((None,), tf.float32),
        ),
    )
    n_batches = -(-len(tokens) // batch_size)
    return ds.apply(
        tf.data.experimental.assert_cardinality(n_batches)
    ).prefetch(tf.data.AUTOTUNE)


# -- models -------------------------------------------------------------
def _classifier_head(x, args, name_prefix=""):
    import keras

    x = keras.layers.Flatten()(x)
    x = keras.layers.Dropout(args.dropout)(x)
    x = keras.layers.Dense(128, activation="relu")(x)
    x = keras.layers.Dropout(args.dropout)(x)
    return keras.layers.Dense(1, activation="sigmoid", name="probability")(x)


def bigram_ids(tokens, vocab_size, buckets):
    """Each position's (word, next word) pair hashed into `[1, buckets)`.

    0 where either word is padding. Integer arithmetic only (multiply,
    modulo), so it runs in LiteRT's builtin ops and at any length.
    """
    from keras import ops

    # tokens: (B, T) → next: (B, T), the last position paired with padding.
    nxt = ops.pad(tokens[:, 1:], [[0, 0], [0, 1]])
    pair = tokens * vocab_size + nxt
    ids = ops.mod(pair, buckets - 1) + 1
    return ops.where(ops.logical_and(tokens > 0, nxt > 0), ids, 0)


def build_ssa(vocab_size, args):
    """Embedding → BiLSTM → StructuredSelfAttention → MLP (Lin et al.)."""
    import keras

    from keras_attn import StructuredSelfAttention

    tokens = keras.Input((args.length,), dtype="int64", name="tokens")
    x = keras.layers.Embedding(vocab_size, args.embed_dim, mask_zero=True)(
        tokens
    )
    if args.bigram_embed:
        pairs = keras.layers.Embedding(
            args.bigram_embed,
            args.embed_dim,
            mask_zero=True,  # Add ORs the masks: without one it drops both
            name="bigram_embedding",
        )(bigram_ids(tokens, vocab_size, args.bigram_embed))
        x = keras.layers.Add()([x, pairs])  # mask: the words' (a superset)
    x = keras.layers.SpatialDropout1D(args.dropout / 2)(x)
    if args.word_dropout:
        # One draw per (review, position): whole words vanish.
        x = keras.layers.Dropout(
            args.word_dropout, noise_shape=(None, None, 1), name="word_drop"
        )(x)
    x = keras.layers.Bidirectional(
        keras.layers.LSTM(args.lstm_units, return_sequences=True)
    )(x)
    m, a = StructuredSelfAttention(
        units=args.attention_units,
        num_hops=args.num_hops,
        penalty_coefficient=args.penalty,
        name="structured_self_attention",
    )(x, return_attention_scores=True)
    prob = _classifier_head(m, args)
    return keras.Model(
        tokens, {"probability": prob, "attention": a}, name="imdb_ssa"
    )


def _encoder_block(x, args, ours=True):
    import keras

    from keras_attn import MultiHeadPositional

    width = args.embed_dim
    if ours:
        att = MultiHeadPositional(
            num_heads=4,
            key_dim=width // 4,
            position=None,  # positions are added once, below the blocks
            feed_forward=None,
            dropout=0.1,
        )(x)
    else:
        att = keras.layers.MultiHeadAttention(
            num_heads=4, key_dim=width // 4, dropout=0.1
        )(x, x)
    x = keras.layers.LayerNormalization()(
        x + keras.layers.Dropout(args.dropout)(att)
    )
    ff = keras.layers.Dense(2 * width, activation="relu")(x)
    ff = keras.layers.Dense(width)(ff)
    return keras.layers.LayerNormalization()(
        x + keras.layers.Dropout(args.dropout)(ff)
    )


def build_encoder(vocab_size, args, ours=True):
    """Two attention blocks over positions-aware embeddings, pooled."""
    import keras

    from keras_attn import SinusoidalPositionEncoding, StructuredSelfAttention

    tokens = keras.Input((args.length,), dtype="int64", name="tokens")
    emb = keras.layers.Embedding(vocab_size, args.embed_dim, mask_zero=True)
    x = emb(tokens)
    # Scale the embeddings by sqrt(d) before adding unit-amplitude sines
    # (Vaswani et al. 2017): otherwise the positions drown the tokens (an
    # unscaled first run stayed at chance, 49.9% validation).
    x = (
        keras.layers.Rescaling(args.embed_dim**0.5)(x)
        + SinusoidalPositionEncoding()(x)
        if ours
        else x
        + keras.layers.Embedding(args.length, args.embed_dim)(
            keras.ops.arange(args.length)[None]
        )
    )
    x = keras.layers.Dropout(args.dropout / 2)(x)
    for _ in range(2):
        x = _encoder_block(x, args, ours=ours)
    if ours:
        m, a = StructuredSelfAttention(
            units=args.attention_units,
            num_hops=args.num_hops,
            penalty_coefficient=args.penalty,
            name="structured_self_attention",
        )(x, return_attention_scores=True)
        prob = _classifier_head(m, args)
        outputs = {"probability": prob, "attention": a}
        name = "imdb_mhp"
    else:
        pooled = keras.layers.GlobalAveragePooling1D()(x)
        outputs = {"probability": _classifier_head(pooled, args)}
        name = "imdb_baseline"
    return keras.Model(tokens, outputs, name=name)


def make_bigram_vectorizer(texts, max_tokens, ngrams=2):
    """1..n-gram presence features, as a sparse `(batch, max_tokens)`."""
    import keras

    from keras_attn.text import standardize_review

    vectorizer = keras.layers.TextVectorization(
        max_tokens=max_tokens,
        standardize=standardize_review,
        ngrams=ngrams,
        output_mode="multi_hot",
        sparse=True,
        name="bigram_vectorizer",
    )
    vectorizer.adapt(texts, batch_size=1024)
    return vectorizer


def sparse_feature_dataset(
    vectorizer, texts, labels, batch_size, shuffle_seed=None, dropout=0.0
):
    """n-gram features computed once and kept in memory (sparse).

    With a shuffle seed (training), each n-gram present in a review is
    dropped with probability `dropout` and the rest scaled by
    `1 / (1 - dropout)`: input dropout, done here because Keras' `Dropout`
    has no sparse form. The model itself stays a plain `Dense`.
    """
    import tensorflow as tf

    ds = (
        tf.data.Dataset.from_tensor_slices((texts, labels))
        .batch(1024)
        .map(lambda x, y: (tf.cast(vectorizer(x), "float32"), y))
        .cache()
        .unbatch()
    )
    if shuffle_seed is None:
        return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)
    ds = ds.shuffle(
        len(texts), seed=shuffle_seed, reshuffle_each_iteration=True
    )

    def drop(x, y):
        keep = tf.random.uniform(tf.shape(x.values)) >= dropout
        x = tf.sparse.retain(x, keep)
        return x * (1.0 / (1.0 - dropout)), y

    ds = ds.batch(batch_size)
    if dropout > 0:
        ds = ds.map(drop)
    return ds.prefetch(tf.data.AUTOTUNE)


def nb_log_count_ratio(vectorizer, texts, labels, alpha=1.0):
    """Naive-Bayes log-count ratio r (Wang & Manning 2012), per feature."""
    import tensorflow as tf

    pos = np.zeros(vectorizer.vocabulary_size(), "float64") + alpha
    neg = pos.copy()
    for start in range(0, len(texts), 1024):
        x = tf.cast(vectorizer(texts[start : start + 1024]), "float32")
        y = (labels[start : start + 1024] > 0.5).astype("float32")
        both = np.stack([y, 1.0 - y], axis=1)  # (B, 2)
        counts = tf.sparse.sparse_dense_matmul(x, both, adjoint_a=True)
        counts = np.asarray(counts, "float64")  # (V, 2)
        pos += counts[:, 0]
        neg += counts[:, 1]
    return np.log((pos / pos.sum()) / (neg / neg.sum())).astype("float32")


def build_bigram(vocab_size, ratio, args):
    """Logistic regression on binary 1..n-gram features, NB-initialized.

    Regularized by input dropout in `sparse_feature_dataset` (and
    optionally `--bigram-weight-decay`).
    """
    import keras

    features = keras.Input((vocab_size,), sparse=True, name="features")
    dense = keras.layers.Dense(1, name="logit")
    logit = dense(features)
    prob = keras.layers.Activation("sigmoid", name="probability")(logit)
    model = keras.Model(features, {"probability": prob}, name="imdb_bigram")
    dense.kernel.assign(ratio[:, None] * args.nb_scale)
    return model


def out_of_fold_teacher(texts, labels, args):
    """The n-gram model's probability for each review, from a model that
    never saw it: `args.distill_folds` models, each trained without one
    fold for `args.bigram_epochs` epochs (no early stopping, so the held
    fold's labels choose nothing)."""
    import keras

    if args.distill_folds < 2:
        raise ValueError(
            "Expected distill_folds >= 2. "
            f"Received: distill_folds={args.distill_folds}"
        )
    vec = make_bigram_vectorizer(texts, args.bigram_tokens, args.ngrams)
    dropout = (
        args.dropout if args.bigram_dropout is None else args.bigram_dropout
    )
    order = np.random.default_rng(args.seed).permutation(len(texts))
    probs = np.zeros(len(texts), "float32")
    for k, held in enumerate(np.array_split(order, args.distill_folds)):
        fit = np.setdiff1d(order, held)
        ratio = nb_log_count_ratio(vec, texts[fit], labels[fit])
        model = build_bigram(vec.vocabulary_size(), ratio, args)
        model = keras.Model(model.input, model.output["probability"])
        model.compile(
            optimizer=_optimizer(
                args.bigram_learning_rate, args.bigram_weight_decay
            ),
            loss="binary_crossentropy",
        )
        ds = sparse_feature_dataset(
            vec,
            texts[fit],
            labels[fit],
            args.batch_size,
            args.seed + k,
            dropout,
        )
        model.fit(ds, epochs=args.bigram_epochs, verbose=0)
        held_ds = sparse_feature_dataset(vec, texts[held], labels[held], 1024)
        probs[held] = model.predict(held_ds, verbose=0)[:, 0]
    return probs


def build_ensemble(seq_text_model, bigram_vectorizer, bigram_model, weight):
    """Raw text → sigmoid(w·logit(p_attention) + (1−w)·logit(p_ngram))."""
    import keras
    from keras import ops

    text = keras.Input((), dtype="string", name="text")
    seq_out = seq_text_model(text)
    big_out = bigram_model(bigram_vectorizer(text))

    def logit(p):
        p = ops.clip(p, 1e-6, 1 - 1e-6)
        return ops.log(p) - ops.log(1 - p)

    mixed = weight * logit(seq_out["probability"]) + (1 - weight) * logit(
        big_out["probability"]
    )
    prob = keras.layers.Activation("sigmoid", name="probability")(mixed)
    outputs = {"probability": prob, "attention": seq_out["attention"]}
    return keras.Model(text, outputs, name="imdb_ensemble")


def best_weight(p_seq, p_big, labels):
    """Ensemble weight with the best validation accuracy (grid of 0.05)."""

    def logit(p):
        p = np.clip(p, 1e-6, 1 - 1e-6)
        return np.log(p) - np.log1p(-p)

    grid = np.round(np.arange(0, 1.0001, 0.05), 2)
    accs = [
        np.mean(
            ((w * logit(p_seq) + (1 - w) * logit(p_big)) > 0) == (labels > 0.5)
        )
        for w in grid
    ]
    return float(grid[int(np.argmax(accs))]), float(np.max(accs))


# -- training -----------------------------------------------------------
def adversarial_trainer(inputs, outputs, epsilon):
    """A functional model whose training step adds an adversarial loss.

    Each step also computes the loss with the embedding rows moved by
    `r = epsilon·sqrt(B)·g/‖g‖` (`g`: the gradient of the loss with respect
    to the embedding matrix, so the perturbation norm per review is about
    `epsilon`), and descends on the sum of both losses (Goodfellow et al.
    2015; Miyato et al. 2017 on word vectors). The looked-up rows are what
    move, so this perturbs the word vectors of the batch. TensorFlow only.
    """
    import keras
    import tensorflow as tf

    class AdversarialTrainer(keras.Model):
        def train_step(self, data):
            x, y = data
            table = next(
                layer.embeddings
                for layer in self.layers
                if isinstance(layer, keras.layers.Embedding)
            )
            weights = self.trainable_weights
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self._compute_loss(
                    x=x, y=y, y_pred=y_pred, training=True
                )
            grads = tape.gradient(loss, weights)
            g = tf.convert_to_tensor(
                grads[next(i for i, w in enumerate(weights) if w is table)]
            )  # (V, E), zero outside the batch's words
            batch = tf.cast(tf.shape(y)[0], g.dtype)
            r = epsilon * tf.sqrt(batch) * g / (tf.norm(g) + 1e-12)
            table.assign_add(tf.stop_gradient(r))
            with tf.GradientTape() as tape:
                adv_loss = self._compute_loss(
                    x=x, y=y, y_pred=self(x, training=True), training=True
                )
            adv_grads = tape.gradient(adv_loss, weights)
            table.assign_sub(r)
            self._loss_tracker.update_state(loss, sample_weight=batch)
            self.optimizer.apply_gradients(
                zip(
                    [
                        tf.convert_to_tensor(a) + tf.convert_to_tensor(b)
                        for a, b in zip(grads, adv_grads, strict=True)
                    ],
                    weights,
                    strict=True,
                )
            )
            return self.compute_metrics(x, y, y_pred, sample_weight=None)

    return AdversarialTrainer(inputs, outputs)


def _optimizer(learning_rate, weight_decay, **options):
    """AdamW with decoupled weight decay, or plain Adam when it is 0."""
    import keras

    if weight_decay:
        return keras.optimizers.AdamW(
            learning_rate, weight_decay=weight_decay, **options
        )
    return keras.optimizers.Adam(learning_rate, **options)


def train_model(model, train_ds, val_ds, args):
    import keras

    # Train through a single-output view of the model (same layers), so
    # that Keras reports accuracy for the probability head.
    epsilon = getattr(args, "adversarial", 0.0)
    trainer = (
        adversarial_trainer(model.input, model.output["probability"], epsilon)
        if epsilon
        else keras.Model(model.input, model.output["probability"])
    )
    ema = getattr(args, "ema", 0.0)
    options = dict(clipnorm=1.0, use_ema=bool(ema), ema_momentum=ema or 0.99)
    trainer.compile(
        optimizer=_optimizer(args.learning_rate, args.weight_decay, **options),
        loss="binary_crossentropy",
        # Against the rounded target, so soft (distilled) targets count too.
        metrics=[
            keras.metrics.MeanMetricWrapper(
                lambda y, p: keras.metrics.binary_accuracy(
                    keras.ops.round(y), p
                ),
                name="accuracy",
            )
        ],
    )
    # Stop on validation accuracy: val_loss also holds the attention
    # penalty, which keeps falling while accuracy has peaked.
    stop = keras.callbacks.EarlyStopping(
        monitor="val_accuracy",
        mode="max",
        patience=args.patience,
        restore_best_weights=True,
    )
    # With EMA, validate (and keep as best) the averaged weights: the swap
    # must come before EarlyStopping in the list.
    callbacks = (
        [keras.callbacks.SwapEMAWeights(swap_on_epoch=True), stop]
        if ema
        else [stop]
    )
    start = time.time()
    history = trainer.fit(
        train_ds,
        validation_data=val_ds,
        epochs=args.epochs,
        callbacks=callbacks,
        verbose=args.verbose,
    )
    return time.time() - start, history.history


def accuracy(model, ds):
    probs, labels = [], []
    for x, y in ds:
        out = model(x, training=False)
        out = out["probability"] if isinstance(out, dict) else out
        probs.append(np.asarray(out)[:, 0])
        labels.append(np.asarray(y))
    probs, labels = np.concatenate(probs), np.concatenate(labels)
    return float(np.mean((probs > 0.5) == (labels > 0.5))), probs, labels


def end_to_end(vectorizer, model):
    """Raw strings in, the model's named outputs out."""
    import keras

    text = keras.Input((), dtype="string", name="text")
    outputs = model(vectorizer(text))
    return keras.Model(text, outputs, name=model.name + "_text")


def _versions():
    import keras
    import tensorflow as tf

    import keras_attn

    return {
        "keras_attn": keras_attn.__version__,
        "keras": keras.__version__,
        "tensorflow": tf.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
    }


def save_artifacts(folder, text_model, vectorizer, metrics):
    from keras_attn.export import export_saved_model

    os.makedirs(folder, exist_ok=True)
    text_model.save(os.path.join(folder, "model.keras"))
    export_saved_model(text_model, os.path.join(folder, "saved_model"))
    with open(os.path.join(folder, "vocabulary.txt"), "w") as f:
        for token in vectorizer.get_vocabulary():
            f.write(token + "\n")
    with open(os.path.join(folder, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)


def text_dataset(texts, labels, batch_size=256):
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices((texts, labels)).batch(batch_size)


def main(argv=None):
    import keras
    import tensorflow as tf

    from keras_attn.export import with_dynamic_length

    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    data = load_imdb(
        args.data_dir,
        args.limit,
        args.val_fraction,
        args.seed,
        args.val_split,
        args.imdb_archive,
    )
    train_x, train_y = data["train"]
    val_text = text_dataset(*data["val"])
    test_text = text_dataset(*data["test"])
    wanted = list(dict.fromkeys(args.model))
    if "ensemble" in wanted:  # the ensemble needs both members
        wanted = [m for m in ("ssa", "bigram") if m not in wanted] + wanted

    t0 = time.time()
    vectorizer = make_vectorizer(train_x, args.max_tokens, args.length)
    vec_time = time.time() - t0
    train_ds = token_dataset(
        vectorizer, train_x, train_y, args.batch_size, shuffle_seed=args.seed
    )
    val_ds = token_dataset(vectorizer, *data["val"], 256)
    distill = {}
    if args.distill and "ssa" in wanted and not args.ssa_model:
        # Soft targets: the labels mixed with a stronger, different model's
        # out-of-fold opinion (knowledge distillation, Hinton et al. 2015).
        t0 = time.time()
        teacher = out_of_fold_teacher(train_x, train_y, args)
        distill = {
            "teacher": "n-gram model, out-of-fold",
            "teacher_oof_accuracy": float(
                np.mean((teacher > 0.5) == (train_y > 0.5))
            ),
            "teacher_wall_time_s": round(time.time() - t0, 1),
        }
        print(json.dumps(distill), flush=True)
        ssa_y = ((1 - args.distill) * train_y + args.distill * teacher).astype(
            "float32"
        )
    else:
        ssa_y = train_y
    if args.bucket and "ssa" in wanted and not args.ssa_model:
        t0 = time.time()
        bucket_train = bucketed_dataset(
            vectorizer, train_x, ssa_y, args.batch_size, args.seed
        )
        bucket_val = bucketed_dataset(vectorizer, *data["val"], 256)
        vec_time += time.time() - t0
    builders = {
        "ssa": lambda: build_ssa(vectorizer.vocabulary_size(), args),
        "mhp": lambda: build_encoder(vectorizer.vocabulary_size(), args, True),
        "baseline": lambda: build_encoder(
            vectorizer.vocabulary_size(), args, False
        ),
    }
    trained, results = {}, {}

    def record(name, text_model, wall, history, vec, extra=None):
        val_acc, val_probs, _ = accuracy(text_model, val_text)
        metrics = {
            "model": name,
            "data": "tfds imdb_reviews/plain_text/1.0.0",
            "split": {
                "train": len(train_x),
                "validation": len(data["val"][0]),
                "validation_from": "train, seeded permutation"
                if args.val_split == "random"
                else "train, whole movies held out: the last "
                f"{args.val_fraction:.0%} of review ids in each class",
                "test": len(data["test"][0]),
                "seed": args.seed,
            },
            "hyperparameters": {
                k: v
                for k, v in vars(args).items()
                if k
                not in (
                    "model",
                    "out",
                    "verbose",
                    "data_dir",
                    "tag",
                    "imdb_archive",
                )
            },
            "epochs_run": len(history.get("loss", [])),
            "history": {
                k: [round(float(v), 5) for v in vs] for k, vs in history.items()
            },
            "train_wall_time_s": round(wall, 1),
            "val_accuracy": val_acc,
            "params": text_model.count_params(),
            "versions": _versions(),
            **(extra or {}),
        }
        if not args.no_test:
            metrics["test_accuracy"], _, _ = accuracy(text_model, test_text)
        results[name] = metrics
        trained[name] = (text_model, val_probs, wall)
        summary = {
            k: metrics[k]
            for k in metrics
            if k
            in (
                "model",
                "val_accuracy",
                "test_accuracy",
                "train_wall_time_s",
                "epochs_run",
            )
        }
        print(json.dumps(summary), flush=True)
        if args.out:
            folder = os.path.join(args.out, f"imdb_{name}{args.tag}")
            save_artifacts(folder, text_model, vec, metrics)

    # --strategy mirrored: data parallel over the local devices (GPUs, or
    # logical CPUs); for several machines use
    # tf.distribute.MultiWorkerMirroredStrategy with TF_CONFIG set.
    scope = (
        tf.distribute.MirroredStrategy().scope()
        if args.strategy == "mirrored"
        else contextlib.nullcontext()
    )
    for name in wanted:
        keras.utils.set_random_seed(args.seed)
        if name == "ssa" and args.ssa_model:
            import keras_attn  # noqa: F401  (registers the layers)

            text_model = keras.saving.load_model(args.ssa_model)
            _, val_probs, _ = accuracy(text_model, val_text)
            with open(
                os.path.join(os.path.dirname(args.ssa_model), "metrics.json")
            ) as f:
                wall = json.load(f)["train_wall_time_s"]
            trained["ssa"] = (text_model, val_probs, wall)
        elif name in builders:
            with scope:
                model = builders[name]()  # static length, for export
                if name == "ssa" and args.bucket:
                    # Train a variable-length copy on the length buckets,
                    # then give the static model its weights.
                    trainable = with_dynamic_length(model)
                    wall, history = train_model(
                        trainable, bucket_train, bucket_val, args
                    )
                    model.set_weights(trainable.get_weights())
                else:
                    ds = train_ds
                    if name == "ssa" and distill:
                        ds = token_dataset(
                            vectorizer,
                            train_x,
                            ssa_y,
                            args.batch_size,
                            shuffle_seed=args.seed,
                        )
                    wall, history = train_model(model, ds, val_ds, args)
            extra = None
            if name == "ssa" and distill:
                extra = {"distillation": distill}
                wall += distill["teacher_wall_time_s"]
            record(
                name,
                end_to_end(vectorizer, model),
                wall + vec_time,
                history,
                vectorizer,
                extra,
            )
        elif name == "bigram":
            t0 = time.time()
            big_vec = make_bigram_vectorizer(
                train_x, args.bigram_tokens, args.ngrams
            )
            ratio = nb_log_count_ratio(big_vec, train_x, train_y)
            model = build_bigram(big_vec.vocabulary_size(), ratio, args)
            big_train = sparse_feature_dataset(
                big_vec,
                train_x,
                train_y,
                args.batch_size,
                args.seed,
                dropout=args.dropout
                if args.bigram_dropout is None
                else args.bigram_dropout,
            )
            big_val = sparse_feature_dataset(big_vec, *data["val"], 256)
            bigram_args = argparse.Namespace(
                **{
                    **vars(args),
                    "learning_rate": args.bigram_learning_rate,
                    "weight_decay": args.bigram_weight_decay,
                    "epochs": args.bigram_epochs,
                }
            )
            wall, history = train_model(model, big_train, big_val, bigram_args)
            trained["bigram_parts"] = (big_vec, model)
            record(
                "bigram",
                end_to_end(big_vec, model),
                time.time() - t0,
                history,
                big_vec,
            )
        elif name == "ensemble":
            labels = data["val"][1]
            weight, _ = best_weight(
                trained["ssa"][1], trained["bigram"][1], labels
            )
            big_vec, big_model = trained["bigram_parts"]
            model = build_ensemble(
                trained["ssa"][0], big_vec, big_model, weight
            )
            wall = trained["ssa"][2] + trained["bigram"][2]
            record(
                "ensemble",
                model,
                wall,
                {},
                vectorizer,
                {
                    "ensemble_weight_ssa": weight,
                    "members": ["ssa", "bigram"],
                    "ssa_model": args.ssa_model or "trained in this run",
                },
            )
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
