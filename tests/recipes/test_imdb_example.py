"""The IMDB examples run end to end on a tiny slice; artifacts reload."""

import json
import os
import sys

import numpy as np
import pytest

from tests.paths import ROOT

sys.path.insert(0, os.path.join(ROOT, "recipes"))

HAS_DATA = os.path.isdir(
    os.path.join(
        os.environ.get("TFDS_DATA_DIR", "/nonexistent"), "imdb_reviews"
    )
)
needs_data = pytest.mark.skipif(
    not HAS_DATA, reason="IMDB not found under TFDS_DATA_DIR"
)
TINY = dict(
    limit=300,
    epochs=1,
    length=48,
    embed_dim=16,
    lstm_units=8,
    attention_units=8,
    num_hops=2,
    verbose=0,
)


def test_model_has_the_paper_structure_and_two_outputs():
    import imdb_classification as ex
    import keras

    hp = {**ex.HPARAMS, "length": 20, "num_hops": 3, "lstm_units": 4}
    model = ex.build_model(50, hp)
    out = model(np.array([[3, 4, 5] + [0] * 17]))
    assert set(out) == {"probability", "attention"}
    assert out["attention"].shape == (1, 3, 20)
    # padding gets no attention; each hop sums to one over the words
    a = np.asarray(out["attention"])
    assert np.all(a[..., 3:] == 0)
    np.testing.assert_allclose(a.sum(-1), 1.0, atol=1e-5)
    names = [type(layer).__name__ for layer in model.layers]
    assert "StructuredSelfAttention" in names and "Bidirectional" in names
    assert isinstance(model.get_layer("probability"), keras.layers.Dense)


def test_the_mask_reaches_the_attention_without_propagation(monkeypatch):
    """Keras 3.16's nightly RNN layers stop propagating masks; the model
    hands the padding mask to its layers by name, so it gives the same
    answers when no layer propagates one (simulated here on any Keras)."""
    import imdb_classification as ex
    import keras

    hp = {**ex.HPARAMS, "length": 12, "num_hops": 2, "lstm_units": 4}
    keras.utils.set_random_seed(0)
    model = ex.build_model(50, hp)
    tokens = np.array([[3, 4, 5] + [0] * 9, list(range(1, 13))])
    want = model(tokens)
    for layer in (keras.layers.Bidirectional, keras.layers.RNN):
        monkeypatch.setattr(layer, "compute_mask", lambda *a, **k: None)
    rebuilt = ex.build_model(50, hp)
    rebuilt.set_weights(model.get_weights())
    got = rebuilt(tokens)
    assert np.all(np.asarray(got["attention"])[0, :, 3:] == 0)
    for key in ("probability", "attention"):
        np.testing.assert_allclose(got[key], want[key], atol=1e-6)


@pytest.mark.slow
@needs_data
def test_main_tiny_slice_and_artifacts(tmp_path):
    import imdb_classification as ex
    import keras
    import tensorflow as tf

    metrics = ex.main(out=str(tmp_path), **TINY)
    assert 0.0 <= metrics["val_accuracy"] <= 1.0 and "test_accuracy" in metrics
    folder = tmp_path / "imdb_ssa"
    on_disk = json.loads((folder / "metrics.json").read_text())
    assert on_disk["split"]["val"] == 30 and on_disk["model"] == "ssa"
    assert on_disk["hyperparameters"]["num_hops"] == 2
    texts = ["a wonderful film <br /><br />loved it", "awful"]
    model = keras.models.load_model(folder / "model.keras")
    want = model.predict(tf.constant(texts), verbose=0)
    served = tf.saved_model.load(str(folder / "saved_model"))
    got = served.signatures["serving_default"](tf.constant(texts))
    np.testing.assert_allclose(
        got["probability"], want["probability"], atol=1e-5
    )
    assert got["attention"].shape == (2, 2, 48)

    # the explain command works on what the example wrote
    import keras_attn_cli

    out = tmp_path / "explain"
    code = keras_attn_cli.main(
        [
            "explain",
            str(folder),
            "A great movie, truly great!",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    page = (out / "attention.html").read_text()
    assert page.count("<summary>Attention, hop") == 2 and "great" in page
    assert (out / "attention.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
@needs_data
def test_mhp_comparison_tiny_slice():
    import imdb_mhp

    rows = imdb_mhp.main(
        limit=200, epochs=1, length=32, embed_dim=16, verbose=0
    )
    assert set(rows) == {"MultiHeadPositional", "keras MHA"}
    for row in rows.values():
        assert 0.0 <= row["val_accuracy"] <= 1.0 and "test_accuracy" in row


def test_mhp_encoders_take_masks_and_differ_only_in_attention():
    import imdb_mhp

    hp = {**imdb_mhp.HPARAMS, "length": 12, "embed_dim": 16}
    ours = imdb_mhp.build_model(40, hp, ours=True)
    theirs = imdb_mhp.build_model(40, hp, ours=False)
    tokens = np.array([[5, 6, 7] + [0] * 9])
    out = ours(tokens)
    assert np.all(np.asarray(out["attention"])[..., 3:] == 0)
    assert set(theirs(tokens)) == {"probability"}
    kinds = {type(layer).__name__ for layer in ours.layers}
    assert "MultiHeadPositional" in kinds
    assert "MultiHeadAttention" in {
        type(layer).__name__ for layer in theirs.layers
    }


@pytest.mark.slow
def test_cli_errors_cleanly_on_bad_model(tmp_path, capsys):
    import keras_attn_cli

    bad = tmp_path / "model.keras"
    bad.write_bytes(b"not a zip file")
    for target in (str(bad), str(tmp_path / "missing.keras")):
        assert keras_attn_cli.main(["explain", target, "hi"]) == 2
        err = capsys.readouterr().err
        assert "keras-attn: error:" in err and "Traceback" not in err


def test_hashed_bigrams_follow_the_formula_and_are_zero_at_padding():
    import imdb_edge
    import keras

    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 20_000, (3, 9))
    tokens[0, 5:] = 0
    tokens[1, 1:] = 0
    bins = 1009
    got = keras.ops.convert_to_numpy(imdb_edge.HashedBigrams(bins)(tokens))
    want = np.zeros_like(got)
    for b in range(3):
        for i in range(9):
            nxt = tokens[b, i + 1] if i < 8 else 0
            if tokens[b, i] and nxt:
                want[b, i] = (tokens[b, i] * 7919 + nxt) % (bins - 2) + 2
            elif tokens[b, i]:
                want[b, i] = 1  # the last word: no pair
    np.testing.assert_array_equal(got, want)
    assert got.min() >= 0 and got.max() < bins
    assert got[0, 4] == 1 and not got[0, 5:].any() and got[2, 8] == 1


def tiny_edge_model(**overrides):
    """`imdb_edge.build_model` at length 12, 8 wide, 50 words."""
    import imdb_edge
    import keras

    keras.utils.set_random_seed(0)
    small = dict(length=12, embed_dim=8, heads=2, attention_units=8)
    return imdb_edge.build_model(
        50, {**imdb_edge.HPARAMS, **small, "num_hops": 2, **overrides}
    )


@pytest.mark.parametrize(
    "bins, blocks, chunk", [(97, 0, 4), (97, 1, 0), (0, 1, 4), (97, 0, 0)]
)
def test_edge_model_never_attends_to_padding(bins, blocks, chunk):
    # Keras's Add drops the mask unless every input has one: both
    # embeddings carry it, so the pooling weights are exactly zero on
    # padding, whole chunks of padding included, and what the padding
    # rows of the embeddings hold changes nothing.
    import keras

    model = tiny_edge_model(bigram_bins=bins, blocks=blocks, chunk=chunk)
    tokens = np.zeros((2, 12), "int64")
    tokens[:, :5] = [[3, 9, 4, 7, 12], [3, 9, 4, 7, 12]]
    tokens[1, 5:8] = [8, 8, 8]
    out = model(tokens)
    weights = keras.ops.convert_to_numpy(out["attention"])
    assert not weights[0, :, 5:].any() and not weights[1, :, 8:].any()
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    # Whatever the padding rows of the embeddings hold, nothing changes.
    for layer in model.layers:
        if isinstance(layer, keras.layers.Embedding):
            table = keras.ops.convert_to_numpy(layer.embeddings).copy()
            table[0] = 50.0 * rng_rows(table.shape[1])
            layer.embeddings.assign(table)
    again = keras.ops.convert_to_numpy(model(tokens)["probability"])
    first = keras.ops.convert_to_numpy(out["probability"])
    np.testing.assert_allclose(again, first, atol=1e-5)


def rng_rows(width):
    return np.random.default_rng(1).normal(size=width).astype("float32")


@pytest.mark.slow
@needs_data
def test_edge_model_tiny_slice_converts_to_full_integer(tmp_path):
    import imdb_edge

    metrics = imdb_edge.main(
        str(tmp_path),
        limit=300,
        evaluate_test=False,
        verbose=0,
        epochs=1,
        length=50,
        embed_dim=16,
        attention_units=8,
        num_hops=2,
        bigram_bins=500,
        calibration=50,
    )
    folder = tmp_path / "imdb_edge"
    assert {"model_float32.tflite", "model_full_int8.tflite"} <= set(
        os.listdir(folder)
    )
    # Full integer: the converter kept int8 builtins only (it fails rather
    # than fall back to float ops), and the file is far smaller.
    ops_used = metrics["ops_full_int8"]
    assert not [o for o in ops_used if "FLEX" in o or "CUSTOM" in o]
    sizes = metrics["sizes_bytes"]
    assert sizes["int8"] < 0.5 * sizes["none"]
    for key in ("val_accuracy_litert_none", "val_accuracy_litert_int8"):
        assert 0.0 <= metrics[key] <= 1.0
    assert (
        abs(metrics["val_accuracy_litert_none"] - metrics["val_accuracy_keras"])
        <= 0.01
    )
    report = json.loads((folder / "litert.json").read_text())
    full = report["model_full_int8.tflite"]
    assert full["size_bytes"] == sizes["int8"] and full["ops"] == ops_used
    assert full["val_accuracy"] == metrics["val_accuracy_litert_int8"]
    assert report["split"] == "val" and "imdb_edge.py" in report["command"]


def test_edge_model_reloads_from_keras_file(tmp_path):
    import keras

    model = tiny_edge_model(bigram_bins=97, chunk=4)
    tokens = np.array([[3, 9, 4, 7, 12, 5, 0, 0, 0, 0, 0, 0]], "int64")
    model.save(tmp_path / "edge.keras")
    again = keras.models.load_model(tmp_path / "edge.keras")
    for key in ("probability", "attention"):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(again(tokens)[key]),
            keras.ops.convert_to_numpy(model(tokens)[key]),
            atol=1e-6,
        )


def test_chunked_pooling_keeps_its_kernel_bound_through_training():
    """`ChunkedAttentionPooling(kernel_constraint=...)` reaches both
    attention layers: after training steps every column of the four
    kernels has norm at most the bound, and the constraint survives a
    config round trip; without it the kernels leave the bound."""
    import imdb_edge
    import keras

    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 12, 8)).astype("float32")
    y = (np.arange(16) % 2).astype("float32")
    for bound in (0.05, None):
        keras.utils.set_random_seed(0)
        constraint = bound and keras.constraints.MaxNorm(bound, axis=0)
        pooling = imdb_edge.ChunkedAttentionPooling(
            4, 8, 2, 2, 0.1, kernel_constraint=constraint
        )
        inputs = keras.Input((12, 8))
        pooled, _ = pooling(inputs)
        out = keras.layers.Dense(1)(keras.layers.Flatten()(pooled))
        model = keras.Model(inputs, out)
        model.compile(keras.optimizers.SGD(1.0), "mse")
        model.fit(x, y, epochs=2, verbose=0)
        kernels = [w for w in pooling.weights if w.path.endswith("kernel")]
        assert len(kernels) == 4, [w.path for w in kernels]
        norms = [
            np.linalg.norm(keras.ops.convert_to_numpy(w), axis=0).max()
            for w in kernels
        ]
        if bound:
            assert max(norms) <= bound + 1e-6, norms
            again = imdb_edge.ChunkedAttentionPooling.from_config(
                pooling.get_config()
            )
            for layer in (again.within, again.across):
                config = layer.kernel_constraint.get_config()
                assert config["max_value"] == bound
        else:
            assert max(norms) > 0.05, norms
