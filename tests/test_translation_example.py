"""The translation example runs end to end on a tiny slice."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
PAIRS = os.path.join(ROOT, "..", "shared", "data", "translation", "pairs.tsv")
needs_pairs = pytest.mark.skipif(
    not os.path.isfile(PAIRS), reason="pairs.tsv not found"
)


def test_missing_pairs_file_is_a_clear_error(tmp_path):
    import translation

    with pytest.raises(FileNotFoundError, match="--pairs"):
        translation.main(str(tmp_path / "none.tsv"))


def test_split_is_by_english_sentence():
    import translation

    pairs = [
        ("Hi.", "Salut."),
        ("Hi.", "Coucou."),
        ("Go.", "Va !"),
        ("Run!", "Cours !"),
        ("Run!", "Courez !"),
        ("Stop!", "Stop !"),
    ]
    train, val = translation.split_by_english(pairs, 0.5, 0)
    assert not {p[0] for p in train} & {p[0] for p in val}
    assert len(train) + len(val) == len(pairs)


@pytest.mark.parametrize("architecture", ["gru", "transformer"])
def test_step_fn_matches_teacher_forcing(architecture):
    # What the searches (and the exported models) run one token at a time
    # must equal the training model's whole-sentence pass: the GRU's
    # AttentionDecoder.step, the Transformer's key/value caches.
    import keras
    import numpy as np
    import translation
    import translation_transformer

    hp = {
        **translation_transformer.HPARAMS,
        "units": 16,
        "embed_dim": 8,
        "heads": 2,
        "feed_forward_dim": 16,
        "target_length": 6,
    }
    build = (
        translation_transformer.build_transformer
        if architecture == "transformer"
        else translation.build_models
    )
    keras.utils.set_random_seed(0)
    trainer, encode, step_fn = build(30, 40, hp)
    src = np.array([[5, 6, 7, 0], [8, 9, 3, 4]], "int32")
    tgt = np.array([[2, 11, 12, 13, 14, 15], [2, 16, 17, 18, 19, 20]], "int32")
    want = keras.ops.convert_to_numpy(trainer([src, tgt], training=False))
    state = encode(keras.ops.convert_to_tensor(src))
    for t in range(tgt.shape[1]):
        logits, state, align = step_fn(
            keras.ops.convert_to_tensor(tgt[:, t]), state, t
        )
        got = keras.ops.convert_to_numpy(logits)
        np.testing.assert_allclose(got, want[:, t], atol=1e-4, rtol=1e-4)
        align = keras.ops.convert_to_numpy(align)
        np.testing.assert_allclose(align.sum(-1), 1.0, atol=1e-5)
        assert np.all(align[0, 3] == 0.0)  # padded source position


@pytest.mark.slow
@needs_pairs
@pytest.mark.parametrize("architecture", ["gru", "transformer"])
def test_main_tiny_slice(tmp_path, architecture):
    import tensorflow as tf
    import translation
    import translation_transformer

    script = translation if architecture == "gru" else translation_transformer
    metrics, _ = script.main(
        PAIRS,
        limit=2000,
        out=str(tmp_path),
        verbose=0,
        epochs=1,
        units=16,
        embed_dim=8,
        heads=2,
        layers=1,
        feed_forward_dim=16,
        score="general",
    )
    for key in ("bleu_cased", "bleu_lowercase", "exact_match"):
        assert 0 <= metrics["val_beam"][key] <= 100
    assert metrics["litert"]["greedy_agreement_with_keras"] >= 0.99
    assert "WHILE" in metrics["litert"]["ops"]
    assert not [op for op in metrics["litert"]["ops"] if "FLEX" in op]
    folder = tmp_path / metrics["model"]
    loaded = tf.saved_model.load(str(folder / "saved_model"))
    assert {"serving_default", "translate", "translate_greedy"} <= set(
        loaded.signatures
    )
    if architecture == "transformer":
        return
    png = tmp_path / "a.png"
    import keras_attn_cli

    code = keras_attn_cli.main(
        ["align", str(folder), "I am tired.", "--out", str(png)]
    )
    assert code == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
