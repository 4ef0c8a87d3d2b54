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


@pytest.mark.slow
@needs_pairs
def test_main_tiny_slice(tmp_path):
    import tensorflow as tf
    import translation

    metrics, _, _ = translation.main(
        PAIRS,
        limit=2000,
        eval_sentences=20,
        out=str(tmp_path),
        verbose=0,
        epochs=1,
        units=16,
        embed_dim=8,
        score="general",
    )
    assert 0 <= metrics["val_bleu_beam"] <= 100
    assert metrics["litert"]["greedy_agreement_with_keras"] >= 0.99
    assert not [op for op in metrics["litert"]["ops"] if "FLEX" in op]
    folder = tmp_path / "translation_en_fr"
    loaded = tf.saved_model.load(str(folder / "saved_model"))
    assert {"serving_default", "translate", "translate_greedy"} <= set(
        loaded.signatures
    )
    png = tmp_path / "a.png"
    import keras_attn_cli

    code = keras_attn_cli.main(
        ["align", str(folder), "I am tired.", "--out", str(png)]
    )
    assert code == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
