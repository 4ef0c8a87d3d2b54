"""The IMDB example runs end to end on a tiny slice; artifacts reload."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

HAS_DATA = os.path.isdir(
    os.path.join(
        os.environ.get("TFDS_DATA_DIR", "/nonexistent"), "imdb_reviews"
    )
)
needs_data = pytest.mark.skipif(
    not HAS_DATA, reason="IMDB not found under TFDS_DATA_DIR"
)


@pytest.mark.slow
@needs_data
def test_main_tiny_slice_and_artifacts(tmp_path):
    import imdb_classification as ex
    import keras
    import tensorflow as tf

    results = ex.main(
        [
            "--model",
            "ensemble",
            "mhp",
            "baseline",
            "--limit",
            "300",
            "--epochs",
            "1",
            "--length",
            "48",
            "--embed-dim",
            "16",
            "--lstm-units",
            "8",
            "--attention-units",
            "8",
            "--num-hops",
            "2",
            "--bigram-tokens",
            "2000",
            "--out",
            str(tmp_path),
            "--verbose",
            "0",
        ]
    )
    assert set(results) == {"ssa", "bigram", "ensemble", "mhp", "baseline"}
    for name, m in results.items():
        assert 0.0 <= m["val_accuracy"] <= 1.0 and "test_accuracy" in m
        folder = tmp_path / f"imdb_{name}"
        on_disk = json.loads((folder / "metrics.json").read_text())
        assert on_disk["model"] == name
        assert on_disk["split"]["validation"] == 30
    texts = np.array(
        ["a wonderful film <br /><br />loved it", "awful"], dtype=object
    )
    folder = tmp_path / "imdb_ensemble"
    model = keras.models.load_model(folder / "model.keras")
    want = model.predict(texts, verbose=0)
    served = tf.saved_model.load(str(folder / "saved_model"))
    got = served.signatures["serving_default"](tf.constant(texts))
    np.testing.assert_allclose(
        got["probability"], want["probability"], atol=1e-5
    )
    assert got["attention"].shape == (2, 2, 48)

    # The ensemble can reuse a trained ssa model instead of training one.
    ssa_path = tmp_path / "imdb_ssa" / "model.keras"
    again = ex.main(
        [
            "--model",
            "ensemble",
            "--ssa-model",
            str(ssa_path),
            "--limit",
            "300",
            "--length",
            "48",
            "--ngrams",
            "3",
            "--bigram-tokens",
            "2000",
            "--bigram-epochs",
            "1",
            "--no-test",
            "--verbose",
            "0",
        ]
    )
    assert set(again) == {"bigram", "ensemble"}
    assert again["ensemble"]["ssa_model"] == str(ssa_path)


def test_sparse_input_dropout_drops_and_rescales():
    import imdb_classification as ex
    import keras

    vec = keras.layers.TextVectorization(
        output_mode="multi_hot", sparse=True, ngrams=2
    )
    texts = np.array(["a b c d e f g h i j"] * 64, dtype=object)
    vec.adapt(texts)
    labels = np.zeros(64, "float32")
    (x, _), *_ = ex.sparse_feature_dataset(vec, texts, labels, 64, 0, 0.5)
    values = np.asarray(x.values)
    np.testing.assert_allclose(values, 2.0)  # kept features scaled by 2
    full = 64 * 19  # 10 unigrams + 9 bigrams per text
    assert 0.4 < len(values) / full < 0.6  # about half dropped
    (v, _), *_ = ex.sparse_feature_dataset(vec, texts, labels, 64)
    assert len(v.values) == full and np.all(np.asarray(v.values) == 1.0)


@pytest.mark.slow
@needs_data
def test_explain_cli_writes_html_and_png(tmp_path):
    import imdb_classification as ex

    ex.main(
        [
            "--model",
            "ssa",
            "--limit",
            "200",
            "--epochs",
            "1",
            "--length",
            "32",
            "--embed-dim",
            "8",
            "--lstm-units",
            "4",
            "--attention-units",
            "4",
            "--num-hops",
            "3",
            "--out",
            str(tmp_path),
            "--verbose",
            "0",
            "--no-test",
        ]
    )
    out = tmp_path / "explain"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "keras_attn",
            "explain",
            str(tmp_path / "imdb_ssa"),
            "A great movie, truly great!",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    page = (out / "attention.html").read_text()
    assert page.count("<h4>Hop") == 3 and "great" in page
    assert (out / "attention.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_cli_errors_cleanly_on_bad_model(tmp_path):
    bad = tmp_path / "model.keras"
    bad.write_bytes(b"not a zip file")
    for target in (str(bad), str(tmp_path / "missing.keras")):
        proc = subprocess.run(
            [sys.executable, "-m", "keras_attn", "explain", target, "hi"],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": ROOT},
        )
        assert proc.returncode == 2
        assert "keras-attn: error:" in proc.stderr
        assert "Traceback" not in proc.stderr


def _length_vectorizer(n=50, length=12, seed=0):
    import keras

    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(30)]
    texts = np.array(
        [
            " ".join(rng.choice(words, size=rng.integers(1, 16)))
            for _ in range(n)
        ],
        dtype=object,
    )
    vec = keras.layers.TextVectorization(output_sequence_length=length)
    vec.adapt(texts)
    return vec, texts


def test_bucketed_batches_cover_each_review_once_trimmed():
    import imdb_classification as ex

    vec, texts = _length_vectorizer()
    full = np.asarray(vec(texts))  # (50, 12)
    ids = np.arange(len(texts), dtype="float32")  # labels carry the row
    ds = ex.bucketed_dataset(vec, texts, ids, 8, shuffle_seed=3)
    passes = []
    for _ in range(2):
        seen = []
        for x, y in ds:
            x, rows = np.asarray(x), np.asarray(y).astype(int)
            lengths = (full[rows] != 0).sum(axis=1)
            assert x.shape[1] == lengths.max()  # cut to the longest
            np.testing.assert_array_equal(x, full[rows, : x.shape[1]])
            seen.extend(rows)
        assert sorted(seen) == list(range(len(texts)))
        passes.append(seen)
    assert passes[0] != passes[1]  # reshuffled on every pass


@pytest.mark.parametrize("bigram_embed", [0, 31])
def test_ssa_trained_on_buckets_equals_static_model(bigram_embed):
    import imdb_classification as ex

    args = ex.parse_args(
        "--length 12 --embed-dim 8 --lstm-units 4 --attention-units 4 "
        f"--num-hops 2 --bigram-embed {bigram_embed}".split()
    )
    from keras_attn.export import with_dynamic_length

    vec, texts = _length_vectorizer()
    static = ex.build_ssa(vec.vocabulary_size(), args)
    dynamic = with_dynamic_length(static)
    full = np.asarray(vec(texts[:8]))  # (8, 12)
    lengths = (full != 0).sum(axis=1)
    assert lengths.min() < full.shape[1]  # some padding to cut
    want = np.asarray(static(full)["probability"])
    # Each review alone, cut to its own length: no padding left at all.
    got = np.concatenate(
        [
            np.asarray(dynamic(row[None, : max(1, n)])["probability"])
            for row, n in zip(full, lengths, strict=True)
        ]
    )
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_bigram_ids_match_a_pairwise_reference():
    import imdb_classification as ex
    import keras

    vocab, buckets = 50, 31
    rng = np.random.default_rng(1)
    tokens = rng.integers(1, vocab, size=(4, 9))
    tokens[0, 5:] = 0
    tokens[1, 1:] = 0
    tokens[3, 4] = 1  # out-of-vocabulary words pair like any other
    want = np.zeros_like(tokens)
    for b in range(tokens.shape[0]):
        for t in range(tokens.shape[1] - 1):
            w, nxt = tokens[b, t], tokens[b, t + 1]
            if w and nxt:
                want[b, t] = (w * vocab + nxt) % (buckets - 1) + 1
    got = keras.ops.convert_to_numpy(
        ex.bigram_ids(keras.ops.convert_to_tensor(tokens), vocab, buckets)
    )
    np.testing.assert_array_equal(got, want)
    assert got.min() >= 0 and got.max() < buckets
    assert (got[:, -1] == 0).all()  # the last word has no successor


def _fake_archive(path, per_class=10):
    import io
    import tarfile

    texts = {}
    with tarfile.open(path, "w:gz") as tar:
        for label in ("pos", "neg"):
            for i in range(per_class):
                text = f"{label} review {i} about movie {i // 2}".encode()
                info = tarfile.TarInfo(f"aclImdb/train/{label}/{i}_7.txt")
                info.size = len(text)
                tar.addfile(info, io.BytesIO(text))
                texts[text] = (int(label == "pos"), i)
    return texts


def test_movie_split_holds_out_the_last_ids_of_each_class(tmp_path):
    import imdb_classification as ex

    archive = tmp_path / "aclImdb.tar.gz"
    texts = _fake_archive(archive)
    train_x = np.array(list(texts), dtype=object)
    train_y = np.array([texts[t][0] for t in train_x], "float32")
    val, train = ex.movie_split(train_x, train_y, str(archive), 0.2)
    held = sorted((texts[t][0], texts[t][1]) for t in train_x[val])
    assert held == [(0, 8), (0, 9), (1, 8), (1, 9)]  # ids 8, 9: movie 4
    assert len(train) == 16 and not set(val) & set(train)

    with pytest.raises(ValueError, match="missing 1 of 21"):
        ex.movie_split(
            np.append(train_x, b"not in the archive"),
            np.append(train_y, 0.0),
            str(archive),
            0.2,
        )
    with pytest.raises(ValueError, match="val_split='movies' needs"):
        ex.load_imdb(val_split="movies", archive=None, data_dir=str(tmp_path))


def test_adversarial_step_sums_both_losses_and_restores_vectors():
    import imdb_classification as ex
    import keras

    def build():
        keras.utils.set_random_seed(0)
        tokens = keras.Input((6,), dtype="int64")
        x = keras.layers.Embedding(20, 4, mask_zero=True)(tokens)
        x = keras.layers.GlobalAveragePooling1D()(x)
        return tokens, keras.layers.Dense(1, activation="sigmoid")(x)

    rng = np.random.default_rng(0)
    x = rng.integers(1, 20, size=(8, 6))
    y = rng.integers(0, 2, size=(8,)).astype("float32")

    def step(model, lr):
        model.compile(keras.optimizers.SGD(lr), "binary_crossentropy")
        before = [w.numpy() for w in model.trainable_weights]
        model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
        after = [w.numpy() for w in model.trainable_weights]
        return [a - b for a, b in zip(after, before, strict=True)]

    plain = step(keras.Model(*build()), 0.1)
    # epsilon 0: the adversarial loss equals the clean one, so the step is
    # exactly twice the plain step.
    doubled = step(ex.adversarial_trainer(*build(), 0.0), 0.1)
    for p, d in zip(plain, doubled, strict=True):
        np.testing.assert_allclose(d, 2 * p, atol=1e-6)
    moved = step(ex.adversarial_trainer(*build(), 1.0), 0.1)
    assert not np.allclose(moved[0], doubled[0], atol=1e-6)
    # No update: the perturbation is taken back (up to float rounding;
    # the perturbation itself is of the order of the vectors).
    frozen = step(ex.adversarial_trainer(*build(), 1.0), 0.0)
    for f in frozen:
        np.testing.assert_allclose(f, 0.0, atol=1e-6)


def test_out_of_fold_teacher_never_scores_a_review_it_trained_on():
    import imdb_classification as ex

    # Each review is one unique word: a model that trained on a review can
    # memorize it, one that did not can only give its bias (the unseen
    # word's weight stays at its zero start with --nb-scale 0).
    n, folds = 60, 3
    texts = np.array([f"uid{i}" for i in range(n)], dtype=object)
    labels = (np.random.default_rng(0).random(n) < 0.5).astype("float32")
    args = ex.parse_args(
        f"--bigram-tokens 100 --ngrams 1 --nb-scale 0 --bigram-epochs 30 "
        f"--bigram-learning-rate 0.1 --bigram-dropout 0 --batch-size 8 "
        f"--distill-folds {folds}".split()
    )
    probs = ex.out_of_fold_teacher(texts, labels, args)
    assert probs.shape == (n,)
    # One value per fold: every held-out review gets its fold model's bias.
    assert len(np.unique(np.round(probs, 5))) <= folds
    accuracy = np.mean((probs > 0.5) == (labels > 0.5))
    assert accuracy < 0.75  # no memorized labels (in-fold would be 1.0)
    with pytest.raises(ValueError, match="distill_folds"):
        ex.out_of_fold_teacher(
            texts, labels, ex.parse_args(["--distill-folds", "1"])
        )
