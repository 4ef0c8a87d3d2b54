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
