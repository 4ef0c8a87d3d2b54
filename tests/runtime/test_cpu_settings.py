"""The runtime's default CPU settings (`cpu_kernels="auto"`): for each
kind of file, the fastest settings that answer the same for the same
input over processes, TensorFlow imported first or not, threads and
concurrent callers.

A full-integer file runs on XNNPACK's signed int8 operators with
consistent arithmetic (flags 0x201) under `CompiledModel`; a
dynamic-range or float file, and any file under the Interpreter, on
LiteRT's builtin kernels. Each check compares a digest of every output
(`tests.runtime.cpu_digest`), so one bit anywhere fails it."""

import concurrent.futures
import json
import os
import subprocess
import sys

import pytest

from tests.paths import DATA, ROOT
from tests.runtime.cpu_digest import digest

pytest.importorskip("ai_edge_litert")

SHIPPED = os.path.join(ROOT, "saved_models")
FULL_INTEGER = {
    "imdb_edge": os.path.join(SHIPPED, "imdb_edge", "model_full_int8.tflite"),
    "imdb_micro": os.path.join(SHIPPED, "imdb_micro", "model_int8.tflite"),
}
BUNDLE = os.path.join(SHIPPED, "translation_en_fr_lm")
DYNAMIC_RANGE = {
    "imdb_ssa": os.path.join(SHIPPED, "imdb_ssa", "model_dynamic_int8.tflite"),
    "translator": os.path.join(SHIPPED, "translation_en_fr", "model.tflite"),
}
REVIEWS = [
    "great film " * k + "an awful, boring mess " * (k % 3) for k in range(1, 13)
]


def sentences(n=12):
    with open(
        os.path.join(DATA, "everyday_sentences.txt"), encoding="utf-8"
    ) as f:
        return [line.strip() for line in f if line.strip()][:n]


def in_children(path, texts, combinations):
    """`digest` in a fresh process for each `(threads, TensorFlow
    first)`, two at a time."""

    def one(combination):
        threads, tensorflow_first = combination
        done = subprocess.run(
            [
                *(sys.executable, "-m", "tests.runtime.cpu_digest"),
                *(path, str(threads), tensorflow_first),
            ],
            input=json.dumps(texts),
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return tuple(json.loads(done.stdout.strip().splitlines()[-1]))

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return list(pool.map(one, combinations))


def shipped(path):
    if not os.path.isfile(path):
        pytest.skip(f"no shipped {os.path.basename(path)}")
    return path


@pytest.mark.parametrize(
    "name, kind, settings",
    [
        ("imdb_edge", "full_integer", "xnnpack:0x201"),
        ("imdb_micro", "full_integer", "xnnpack:0x201"),
        ("imdb_ssa", "dynamic_range", "xnnpack"),
        ("translator", "dynamic_range", "xnnpack"),
    ],
)
def test_each_kind_gets_its_settings(name, kind, settings):
    from keras_attn_runtime.artifact import load_verified
    from keras_attn_runtime.engine import LiteRTModel

    path = shipped({**FULL_INTEGER, **DYNAMIC_RANGE}[name])
    data, model = load_verified(path)
    litert = LiteRTModel(data, model, path)
    assert (litert.kind, litert.cpu_settings) == (kind, settings)
    # A dynamic-range file runs under the Interpreter by default, on
    # XNNPACK's defaults; under CompiledModel, on the builtin kernels.
    engine = "interpreter" if kind == "dynamic_range" else "compiled_model"
    assert litert.engine == engine
    compiled = LiteRTModel(data, model, path, interpreter=False)
    assert compiled.engine == "compiled_model"
    assert compiled.cpu_settings == (
        "builtin" if kind == "dynamic_range" else settings
    )
    # The Interpreter takes no XNNPACK flags: XNNPACK's defaults.
    under = LiteRTModel(data, model, path, interpreter=True)
    assert under.cpu_settings == "xnnpack"
    # Asked for by name, a setting is what it says.
    for asked in ("builtin", "xnnpack"):
        named = LiteRTModel(data, model, path, cpu_kernels=asked)
        assert named.cpu_settings == asked


def test_a_translators_loops_run_the_kernels_of_its_own_file():
    """A stream decoded in the shared loops (the Interpreter) is the
    sentence's translation by the file itself: the loops take the file's
    own kernels (XNNPACK's by default, the builtin kernels when asked),
    not the Interpreter's default."""
    from keras_attn_runtime import LiteRTTranslator

    texts = sentences(6)
    for asked, runs in (("auto", "xnnpack"), ("builtin", "builtin")):
        translator = LiteRTTranslator(
            shipped(DYNAMIC_RANGE["translator"]), cpu_kernels=asked
        )
        assert translator.litert.cpu_settings == runs
        loops = translator.batch_streams()
        (batcher,) = loops.batchers
        assert batcher.decoder.litert.engine == "interpreter"
        assert batcher.decoder.litert.cpu_settings == runs
        assert [translator.translate(t) for t in texts] == [
            "".join(translator.stream(t)) for t in texts
        ]


def test_the_digest_tells_settings_apart():
    """The check can fail: a full-integer file's numbers under LiteRT's
    builtin kernels differ from XNNPACK's, and the digest says so."""
    path = shipped(FULL_INTEGER["imdb_micro"])
    auto, settings = digest(path, REVIEWS, callers=1)
    builtin, _ = digest(path, REVIEWS, callers=1, cpu_kernels="builtin")
    assert settings == "xnnpack:0x201" and auto != builtin


@pytest.mark.parametrize("name", sorted(FULL_INTEGER))
def test_a_full_integer_file_answers_the_same_everywhere(name):
    """Cheap: this process (one caller, one thread) against four callers
    here, and fresh processes on one thread and two, four callers each."""
    path = shipped(FULL_INTEGER[name])
    want = digest(path, REVIEWS, callers=1)
    assert digest(path, REVIEWS, num_threads=2) == want
    assert set(in_children(path, REVIEWS, [(1, "no"), (2, "no")])) == {want}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted({**FULL_INTEGER, **DYNAMIC_RANGE}))
def test_every_shipped_file_answers_the_same_over_processes_imports_threads(
    name,
):
    """Processes × TensorFlow imported first or not × 1 or 2 threads, four
    callers in each: one digest, that of one caller here."""
    path = shipped({**FULL_INTEGER, **DYNAMIC_RANGE}[name])
    texts = sentences() if name == "translator" else REVIEWS
    want = digest(path, texts, callers=1)
    combinations = [(t, tf) for t in (1, 2) for tf in ("no", "yes")]
    got = in_children(path, texts, combinations)
    assert set(got) == {want}, dict(zip(combinations, got, strict=True))


@pytest.mark.slow
def test_the_decoder_only_bundle_answers_the_same_over_processes_and_imports():
    """The bundle's copies run the Interpreter on XNNPACK's defaults: its
    greedy and seeded answers, over processes × TensorFlow imported first
    or not × 1 or 2 copies, four callers in each, are one caller's here."""
    pytest.importorskip("tokenizers")
    shipped(os.path.join(BUNDLE, "model.litertlm"))
    texts = sentences(8)
    want = digest(BUNDLE, texts, callers=1)
    assert want[1] == "xnnpack"
    combinations = [(1, "no"), (1, "yes"), (2, "no"), (2, "yes")]
    got = in_children(BUNDLE, texts, combinations)
    assert set(got) == {want}, dict(zip(combinations, got, strict=True))
