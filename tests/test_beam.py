"""Apache Beam's RunInference with the SavedModel handlers
(`keras_attn.beam`) on DirectRunner: the shipped classifier's and
translator's SavedModels loaded with `tf.saved_model.load` (no
tensorflow-hub, no tf-keras), each text's result equal to a direct call
of the signature on that text alone."""

import os

import numpy as np
import pytest

from tests.beam_cases import REVIEWS, SENTENCES, run
from tests.paths import ROOT

pytest.importorskip("apache_beam")

SHIPPED = os.path.join(ROOT, "saved_models")
CLASSIFIER = os.path.join(SHIPPED, "imdb_ssa")
TRANSLATOR = os.path.join(SHIPPED, "translation_en_fr")


def folder(path):
    if not os.path.isdir(os.path.join(path, "saved_model")):
        pytest.skip(f"no shipped {os.path.basename(path)}")
    return path


def test_the_classifier_handler_gives_each_text_its_direct_probability():
    from keras_attn.beam import SavedModelClassifierHandler
    from keras_attn.loading.opener import SavedModelArtifact

    path = folder(CLASSIFIER)
    got = run(SavedModelClassifierHandler(path, max_batch_size=8), REVIEWS)
    artifact = SavedModelArtifact(os.path.join(path, "saved_model"))
    for text in REVIEWS:
        out = artifact.run(
            "serving_default", {"text": np.array([text.encode()], object)}
        )
        # A batch of 8 against one text: the same float32 math, to the
        # last bits the batched matmul may reorder.
        assert got[text] == pytest.approx(
            float(out["probability"][0, 0]), abs=1e-6
        )
    maps = run(SavedModelClassifierHandler(path, attention=True), REVIEWS[:2])
    for text, result in maps.items():
        out = artifact.run(
            "serving_default", {"text": np.array([text.encode()], object)}
        )
        want = np.asarray(out["attention"][0], "float32")
        assert result["attention"].shape == want.shape  # (hops, tokens)
        np.testing.assert_allclose(result["attention"], want, atol=1e-6)


@pytest.mark.slow  # two loads of the SavedModel translator, a pipeline
def test_the_translator_handler_gives_each_sentence_its_translation():
    from keras_attn.beam import SavedModelTranslatorHandler
    from keras_attn.loading.opener import SavedModelArtifact

    path = folder(TRANSLATOR)
    handler = SavedModelTranslatorHandler(path, bucket_by_length=True)
    got = run(handler, SENTENCES)
    artifact = SavedModelArtifact(os.path.join(path, "saved_model"))
    for sentence in SENTENCES:
        out = artifact.run(
            "translate", {"text": np.array([sentence.encode()], object)}
        )
        assert got[sentence] == out["translation"][0].decode(), sentence


def test_an_unknown_signature_is_named_when_the_model_loads():
    from keras_attn.beam import SavedModelTranslatorHandler

    handler = SavedModelTranslatorHandler(folder(CLASSIFIER))
    with pytest.raises(ValueError, match="'translate' signature"):
        handler.load_model()
