"""The runtime gives the same numbers for the same input, whatever the
load, the number of callers or the process.

Under `CompiledModel`, XNNPACK's kernels answered a review of the shipped
dynamic-range int8 file differently from one call, caller or process to
the next (by up to 1.6e-3 in probability; one thread or several, more
often once TensorFlow was imported first). The default
(`cpu_kernels="auto"`) runs such a file under LiteRT's Interpreter on
XNNPACK's defaults, which answer as a plain single-threaded Interpreter
with XNNPACK, every time and on any number of threads; LiteRT's builtin
kernels (`cpu_kernels="builtin"`, `CompiledModel`) answer as the
Interpreter's builtin kernels. Full-integer files and every shipped file
over processes: `test_cpu_settings.py`.
"""

import os
import threading

import numpy as np
import pytest

from tests.paths import ROOT

pytest.importorskip("ai_edge_litert")

SHIPPED = os.path.join(ROOT, "saved_models", "imdb_ssa")
DYNAMIC_INT8 = os.path.join(SHIPPED, "model_dynamic_int8.tflite")
# Lengths 1 to 12 words, where the multi-threaded kernels drifted most.
TEXTS = ["great film " * k for k in range(1, 13)] + [
    "an awful, boring mess " * k for k in (1, 3, 9)
]


def interpreter_answers(path, clf, texts, builtin=False):
    """Each text's probability from LiteRT's Interpreter on one thread,
    with XNNPACK's defaults or its builtin kernels, fed the runtime's own
    token ids (the reference)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    runner = Interpreter(
        model_path=path,
        num_threads=1,
        experimental_op_resolver_type=(
            OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
            if builtin
            else OpResolverType.AUTO
        ),
    ).get_signature_runner("serving_default")
    out = []
    for text in texts:
        ids = np.asarray(clf.tokenizer([text]), "int32")
        if clf.dynamic:
            ids = ids[:, : max(1, int((ids > 0).sum()))]
        probability = runner(**{clf.input_name: ids})["probability"]
        out.append(float(np.ravel(probability)[0]))
    return out


@pytest.fixture(scope="module")
def classifier():
    from keras_attn_runtime import LiteRTClassifier

    if not os.path.isfile(DYNAMIC_INT8):
        pytest.skip("no shipped dynamic-range int8 file")
    return LiteRTClassifier(DYNAMIC_INT8)


def answers(clf, texts):
    return [float(np.ravel(clf.predict([t])["probability"])[0]) for t in texts]


def test_the_default_answers_as_the_interpreter_bit_for_bit(classifier):
    # A dynamic-range file: the default runs the Interpreter, XNNPACK's
    # defaults.
    assert classifier.litert.engine == "interpreter"
    assert classifier.litert.kind == "dynamic_range"
    assert classifier.litert.cpu_kernels == "auto"
    assert classifier.litert.cpu_settings == "xnnpack"
    want = interpreter_answers(DYNAMIC_INT8, classifier, TEXTS)
    # Twice: a second call at each length reuses the buffers of the first.
    assert answers(classifier, TEXTS) == want
    assert answers(classifier, TEXTS[::-1]) == want[::-1]


def test_the_builtin_kernels_answer_as_the_interpreters_bit_for_bit(
    classifier,
):
    from keras_attn_runtime import LiteRTClassifier

    builtin = LiteRTClassifier(DYNAMIC_INT8, cpu_kernels="builtin")
    assert builtin.litert.engine == "compiled_model"
    assert builtin.litert.cpu_settings == "builtin"
    want = interpreter_answers(DYNAMIC_INT8, classifier, TEXTS, builtin=True)
    assert answers(builtin, TEXTS) == want
    assert answers(builtin, TEXTS[::-1]) == want[::-1]


@pytest.mark.parametrize("num_threads", [2, None])
def test_more_threads_give_the_same_numbers(classifier, num_threads):
    from keras_attn_runtime import LiteRTClassifier

    threaded = LiteRTClassifier(DYNAMIC_INT8, num_threads=num_threads)
    assert answers(threaded, TEXTS) == answers(classifier, TEXTS)


def test_concurrent_callers_get_the_answers_of_one_caller(classifier):
    answers_ = interpreter_answers(DYNAMIC_INT8, classifier, TEXTS)
    want = dict(zip(TEXTS, answers_, strict=True))
    differ = []

    def caller(seed):
        rng = np.random.default_rng(seed)
        for _ in range(30):
            text = TEXTS[rng.integers(len(TEXTS))]
            got = float(np.ravel(classifier.predict([text])["probability"])[0])
            if got != want[text]:
                differ.append((text, got, want[text]))

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert differ == []


def test_the_opener_that_serve_uses_runs_the_default():
    from keras_attn_runtime import opener

    if not os.path.isfile(DYNAMIC_INT8):
        pytest.skip("no shipped dynamic-range int8 file")
    artifact = opener.open(DYNAMIC_INT8)
    assert artifact.classifier.litert.engine == "interpreter"
    assert artifact.classifier.litert.cpu_settings == "xnnpack"


def test_cpu_kernels_is_checked():
    from keras_attn_runtime import LiteRTClassifier

    with pytest.raises(ValueError, match="cpu_kernels='fast'"):
        LiteRTClassifier(DYNAMIC_INT8, cpu_kernels="fast")
