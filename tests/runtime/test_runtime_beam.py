"""Apache Beam's RunInference with the runtime's LiteRT handlers
(`keras_attn_runtime.beam`) on DirectRunner: each text's result equals
the reader's own direct call exactly, in one process and on two worker
processes; the handler's hints, bytes and namespace; bad elements named;
the readers pickle. The shipped files; no TensorFlow on the path."""

import os
import pickle

import numpy as np
import pytest

from tests.beam_cases import REVIEWS, SENTENCES, run  # noqa: F401
from tests.paths import ROOT

beam = pytest.importorskip("apache_beam")

SHIPPED = os.path.join(ROOT, "saved_models")
EDGE = os.path.join(SHIPPED, "imdb_edge", "model_full_int8.tflite")
TRANSLATOR = os.path.join(SHIPPED, "translation_en_fr", "model.tflite")


def shipped(path):
    if not os.path.isfile(path):
        pytest.skip(f"no shipped {os.path.relpath(path, ROOT)}")
    return path


def test_the_classifier_handler_gives_each_text_its_direct_probability():
    from keras_attn_runtime import LiteRTClassifier
    from keras_attn_runtime.beam import LiteRTClassifierHandler

    path = shipped(EDGE)
    reader = LiteRTClassifier(path)
    got = run(LiteRTClassifierHandler(path, max_batch_size=8), REVIEWS)
    assert sorted(got) == sorted(REVIEWS)
    for text in REVIEWS:
        want = float(reader.predict([text])["probability"][0, 0])
        assert got[text] == want, text
    maps = run(LiteRTClassifierHandler(path, attention=True), REVIEWS[:4])
    for text, result in maps.items():
        direct = reader.predict([text])
        assert result["probability"] == float(direct["probability"][0, 0])
        np.testing.assert_array_equal(
            result["attention"], direct["attention"][0]
        )


def test_the_translator_handler_gives_each_sentence_its_translation():
    from keras_attn_runtime import LiteRTTranslator
    from keras_attn_runtime.beam import LiteRTTranslatorHandler

    path = shipped(TRANSLATOR)
    reader = LiteRTTranslator(path)
    got = run(LiteRTTranslatorHandler(path, bucket_by_length=True), SENTENCES)
    # The file's one answer, as the server and the command line give it.
    assert got == {s: reader.answer(s) for s in SENTENCES}


@pytest.mark.slow
def test_two_worker_processes_give_the_same_answers():
    from keras_attn_runtime import LiteRTClassifier, LiteRTTranslator
    from keras_attn_runtime.beam import (
        LiteRTClassifierHandler,
        LiteRTTranslatorHandler,
    )

    edge, translator = shipped(EDGE), shipped(TRANSLATOR)
    got = run(LiteRTClassifierHandler(edge), REVIEWS, workers=2)
    reader = LiteRTClassifier(edge)
    assert got == {
        t: float(reader.predict([t])["probability"][0, 0]) for t in REVIEWS
    }
    got = run(LiteRTTranslatorHandler(translator), SENTENCES, workers=2)
    french = LiteRTTranslator(translator)
    assert got == {s: french.answer(s) for s in SENTENCES}


def test_hints_bytes_namespace_and_bad_elements():
    from keras_attn_runtime.beam import (
        LiteRTClassifierHandler,
        LiteRTTranslatorHandler,
        word_count,
    )

    handler = LiteRTClassifierHandler("m.tflite")  # opened on a worker only
    assert handler.batch_elements_kwargs() == {
        "min_batch_size": 1,
        "max_batch_size": 64,
    }
    assert handler.get_num_bytes(["héllo", b"ab"]) == 8
    assert handler.get_metrics_namespace() == "keras_attn"
    bucketed = LiteRTTranslatorHandler("t.tflite", bucket_by_length=True)
    kwargs = bucketed.batch_elements_kwargs()
    # Beam buckets by length only with a batch duration: one is set.
    assert kwargs["length_fn"] is word_count and kwargs["max_batch_size"] == 16
    assert kwargs["max_batch_duration_secs"] == 1
    with pytest.raises(TypeError, match="Received: int 5"):
        handler.run_inference([5], model=None)
    with pytest.raises(ValueError, match="model_path="):
        LiteRTClassifierHandler("")
    with pytest.raises(ValueError, match="inference_args="):
        handler.validate_inference_args({"attention": True})


def test_the_readers_pickle_and_answer_the_same():
    from keras_attn_runtime import LiteRTClassifier, LiteRTTranslator

    reader = LiteRTClassifier(shipped(EDGE))
    again = pickle.loads(pickle.dumps(reader))
    text = REVIEWS[0]
    np.testing.assert_array_equal(
        again.predict([text])["attention"], reader.predict([text])["attention"]
    )
    translator = LiteRTTranslator(shipped(TRANSLATOR))
    copy = pickle.loads(pickle.dumps(translator))
    assert copy.translate(SENTENCES[1]) == translator.translate(SENTENCES[1])


def test_a_litert_pipeline_imports_neither_tensorflow_nor_keras():
    import subprocess
    import sys

    script = (
        "import sys\n"
        "import apache_beam as beam\n"
        "from apache_beam.ml.inference.base import RunInference\n"
        "from keras_attn_runtime.beam import LiteRTClassifierHandler\n"
        "with beam.Pipeline() as p:\n"
        "    _ = (p | beam.Create(['A fine film.'])\n"
        f"         | RunInference(LiteRTClassifierHandler({EDGE!r})))\n"
        "loaded = [m for m in ('tensorflow', 'keras') if m in sys.modules]\n"
        "print(loaded)\n"
    )
    shipped(EDGE)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


@pytest.mark.slow
def test_bad_elements_reach_the_dead_letters_alone():
    """200 reviews and five bad elements: every review is answered, and
    only the bad elements are dead letters, each with its reason (before,
    a bad element failed its whole batch)."""
    from apache_beam.ml.inference.base import RunInference
    from apache_beam.testing.util import assert_that, equal_to

    from keras_attn_runtime import LiteRTClassifier
    from keras_attn_runtime.beam import LiteRTClassifierHandler

    path = shipped(EDGE)
    reviews = [f"{REVIEWS[i % len(REVIEWS)]} ({i})" for i in range(200)]
    bad = [None, 7, {"text": "x"}, "  ", b"\xff\xfe"]
    want = LiteRTClassifier(path).predict(reviews)["probability"][:, 0]
    with beam.Pipeline() as p:
        main, dlq = (
            p
            | beam.Create(reviews + bad, reshuffle=True)
            | RunInference(
                LiteRTClassifierHandler(path, max_batch_size=64)
            ).with_exception_handling()
        )
        answered = main | beam.Map(lambda r: (r.example, round(r.inference, 6)))
        assert_that(
            answered,
            equal_to(
                [
                    (t, round(float(w), 6))
                    for t, w in zip(reviews, want, strict=True)
                ]
            ),
            label="every review answered",
        )
        dead = dlq.failed_preprocessing[0] | beam.Map(
            lambda failed: (repr(failed[0]), failed[1][0].__name__)
        )
        assert_that(
            dead,
            equal_to(
                [
                    ("None", "TypeError"),
                    ("7", "TypeError"),
                    ("{'text': 'x'}", "TypeError"),
                    ("'  '", "ValueError"),
                    (repr(b"\xff\xfe"), "ValueError"),
                ]
            ),
            label="only the bad ones dead",
        )
        assert_that(
            dlq.failed_inferences, equal_to([]), label="no batch failed"
        )


@pytest.mark.slow
def test_a_text_past_the_translators_window_is_a_dead_letter_alone():
    """A sentence of more subwords than the translator file reads failed
    its whole batch; it is now refused alone, before batching, and its
    would-be batch-mates are translated."""
    from apache_beam.ml.inference.base import RunInference
    from apache_beam.testing.util import assert_that, equal_to

    from keras_attn_runtime import LiteRTTranslator
    from keras_attn_runtime.beam import LiteRTTranslatorHandler

    path = shipped(TRANSLATOR)
    sentences = [f"I see {n} cats." for n in range(12)]
    long = " ".join(["the cat sat on the mat"] * 30)
    model = LiteRTTranslator(path)
    want = [(s, model.answer(s)) for s in sentences]
    with pytest.raises(ValueError, match="subword tokens"):
        model.translate(long)
    with beam.Pipeline() as p:
        main, dlq = (
            p
            | beam.Create([*sentences, long], reshuffle=True)
            | RunInference(
                LiteRTTranslatorHandler(path, max_batch_size=16)
            ).with_exception_handling()
        )
        answered = main | beam.Map(lambda r: (r.example, r.inference))
        assert_that(answered, equal_to(want), label="every sentence")
        dead = dlq.failed_preprocessing[1] | beam.Map(
            lambda failed: (failed[0], failed[1][0].__name__)
        )
        assert_that(dead, equal_to([(long, "PromptTooLong")]), label="long")
        assert_that(
            dlq.failed_inferences, equal_to([]), label="no batch failed"
        )


LM = os.path.join(SHIPPED, "translation_en_fr_lm")


@pytest.mark.slow
def test_the_bundle_handler_completes_each_text_and_refuses_a_long_one_alone():
    """A decoder-only folder's bundle in a pipeline: each completion is
    the folder's greedy answer (as `keras-attn serve` gives it), and a
    prompt past the window reaches the dead letters by itself."""
    from apache_beam.ml.inference.base import RunInference
    from apache_beam.testing.util import assert_that, equal_to

    from keras_attn_runtime.beam import BundleGeneratorHandler
    from keras_attn_runtime.generator import BundleGenerator
    from keras_attn_runtime.signature import PromptTooLong

    if not os.path.isdir(LM):
        pytest.skip("no shipped translation_en_fr_lm")
    sentences = SENTENCES[:4]
    model = BundleGenerator(LM, loops=1)
    want = list(zip(sentences, model.generate(sentences), strict=True))
    long = " ".join(["the cat sat on the mat"] * 30)
    with pytest.raises(PromptTooLong):
        model.check_prompt(long)
    with beam.Pipeline() as p:
        main, dlq = (
            p
            | beam.Create([*sentences, long], reshuffle=True)
            | RunInference(BundleGeneratorHandler(LM)).with_exception_handling()
        )
        answered = main | beam.Map(lambda r: (r.example, r.inference))
        assert_that(answered, equal_to(want), label="every sentence")
        dead = dlq.failed_preprocessing[1] | beam.Map(lambda f: f[0])
        assert_that(dead, equal_to([long]), label="long")
    with pytest.raises(ValueError, match="model_path="):
        BundleGeneratorHandler(os.path.dirname(TRANSLATOR)).load_model()
