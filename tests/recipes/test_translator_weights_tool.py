"""`tools/translator_weights_from_saved_model.py`: the float weights it
reads back from the shipped translator's SavedModel translate as the
SavedModel does, once quantized again by Keras."""

import importlib.util
import json
import os

import pytest

from tests.paths import ROOT

FOLDER = os.path.join(ROOT, "saved_models", "translation_en_fr")
TOOL = os.path.join(ROOT, "tools", "translator_weights_from_saved_model.py")


def _tool():
    spec = importlib.util.spec_from_file_location("weights_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _recipe_model():
    """Whether the shipped translator is the recipe's default model (a
    subword one, whose LiteRT file says so)."""
    from keras_attn_runtime import artifact

    path = os.path.join(FOLDER, "model.tflite")
    if not os.path.isfile(path):
        return False
    _, model = artifact.load_verified(path)
    config = json.loads(artifact.metadata(model)[artifact.METADATA_CONFIG])
    return "subwords" in config


@pytest.mark.slow
@pytest.mark.skipif(not _recipe_model(), reason="no subword translator shipped")
def test_weights_read_back_translate_as_the_saved_model(tmp_path):
    import tensorflow as tf

    tool = _tool()
    weights = str(tmp_path / "w.weights.h5")
    tool.main(FOLDER, weights)
    with pytest.raises(ValueError, match="exists"):
        tool.main(FOLDER, weights)  # nothing is overwritten
    with open(weights + ".vocabularies.json", encoding="utf-8") as f:
        vocabularies = json.load(f)
    hp = dict(tool.translation.HPARAMS)
    vec_en, vec_fr = tool.translation.make_vectorizers(
        [], hp, weights + ".vocabularies.json"
    )
    trainer, encode, step_fn = tool.build(vocabularies)
    trainer.load_weights(weights)
    tool.int8_weight_only(trainer)
    translator = tool.translation.make_translator(
        trainer, encode, step_fn, vec_en, vec_fr, hp
    )
    sentences = [
        "I am tired.",
        "She is reading a book.",
        "I have 3 cats and 12 dogs.",
        "Where is the station?",
        "The cat sleeps on the sofa, my mother washes the dishes after lunch "
        "and the children are playing in the garden.",
    ]
    shipped = tf.saved_model.load(os.path.join(FOLDER, "saved_model"))
    out = shipped.signatures["translate"](tf.constant(sentences))
    expected = [t.decode() for t in out["translation"].numpy()]
    assert translator.translate_texts(sentences) == expected
