"""Edge targets for real (slow tier): every shipped full-integer file and
every full-integer row of the export matrix run by TensorFlow Lite Micro,
OpenVINO and LiteRT's NPU compiler (Intel plugin), and judged by
TensorFlow's GPU-delegate analyzer. The bounds are issue #43's
(docs/edge.md has the measured figures)."""

import json
import os

import numpy as np
import pytest

from keras_attn import export
from keras_attn.export import edge_targets as edge
from keras_attn.export import flatbuffer
from tests.layer_models import BUILDERS, IDS, RNG, T, V
from tests.paths import ROOT

pytestmark = pytest.mark.slow
pytest.importorskip("tflite_micro")
pytest.importorskip("openvino")
pytest.importorskip("ai_edge_litert.aot.vendors.intel_openvino")


def _int8_dot_products():
    """Whether the CPU has int8 dot-product instructions (VNNI, AMX), or
    `None` where its flags cannot be read. Without them OpenVINO's int8
    products take another path, whose outputs were measured further from
    LiteRT's than the bounds below (0.168 on a probability of imdb_edge,
    on an AVX2 CPU without VNNI): those bounds are VNNI machines'."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = set(f.read().split())
    except OSError:
        return None
    return bool(flags & {"avx512_vnni", "avx_vnni", "amx_int8"})


VNNI = pytest.mark.skipif(
    _int8_dot_products() is False,
    reason="OpenVINO's bounds were measured on CPUs with VNNI; this CPU "
    "has none, and OpenVINO's int8 path there moves further (docs/edge.md)",
)
MODELS = os.path.join(ROOT, "saved_models")
SHIPPED = ["imdb_edge/model_full_int8.tflite", "imdb_micro/model_int8.tflite"]
STEP = 1 / 256  # the int8 probability's resolution


@pytest.fixture(scope="module")
def reviews():
    """The first 1,000 test reviews (the offline TFDS copy)."""
    tfds = pytest.importorskip("tensorflow_datasets")
    split = tfds.load("imdb_reviews", split="test", batch_size=-1)
    data = tfds.as_numpy(split)
    texts = [t.decode() for t in data["text"][:1000]]
    return texts, data["label"]


def litert_probabilities(path, ids):
    from keras_attn_runtime import LiteRTClassifier

    return LiteRTClassifier(path).predict_ids(ids)["probability"][:, 0]


def on_targets(name, reviews):
    """`(LiteRT, TFLM on 300, OpenVINO on 1,000)` probabilities."""
    from keras_attn_runtime import LiteRTClassifier

    path = os.path.join(MODELS, name)
    ids = LiteRTClassifier(path).tokenizer(reviews[0])
    lite = litert_probabilities(path, ids)
    micro = edge.MicroModel(path).run(ids[:300])["probability"][:, 0]
    vino = edge.openvino_run(path, ids)["probability"][:, 0]
    return lite, micro, vino


@VNNI
@pytest.mark.parametrize("name", SHIPPED)
def test_openvino_keeps_its_bound_on_every_test_review(name):
    """The bound docs/edge.md states holds on the whole test split, not
    on one sample of it: |Δp| ≤ 0.05 against LiteRT on all 25,000
    reviews, and at least 99.9% of the labels the same (measured: 0.047
    and 10 flips for imdb_edge, 0.035 and 17 for imdb_micro)."""
    tfds = pytest.importorskip("tensorflow_datasets")
    from keras_attn_runtime import LiteRTClassifier

    data = tfds.as_numpy(tfds.load("imdb_reviews", split="test", batch_size=-1))
    path = os.path.join(MODELS, name)
    ids = LiteRTClassifier(path).tokenizer([t.decode() for t in data["text"]])
    lite = litert_probabilities(path, ids)
    vino = edge.openvino_run(path, ids)["probability"][:, 0]
    assert np.abs(vino - lite).max() <= 0.05
    assert np.mean((vino > 0.5) == (lite > 0.5)) >= 0.999


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_full_integer_file_runs_on_every_target(name, reviews):
    path = os.path.join(MODELS, name)
    for target in edge.TARGETS:
        assert edge.edge_problems(path, target) == [], target
    lite, micro, vino = on_targets(name, reviews)
    assert np.all((micro > 0.5) == (lite[:300] > 0.5))
    # No further from LiteRT than measured when the file was shipped
    # (docs/edge.md): 0/256 (edge) and 3/256 (micro) for TFLM, 0.0195
    # for OpenVINO on these reviews (on a CPU with VNNI).
    ceiling = {"imdb_edge": (0, 0.02), "imdb_micro": (3, 0.02)}
    steps, vino_bound = ceiling[name.split("/")[0]]
    assert np.abs(micro - lite[:300]).max() <= steps * STEP + 1e-6
    if _int8_dot_products() is not False:
        assert np.mean((vino > 0.5) == (lite > 0.5)) >= 0.99
        assert np.abs(vino - lite).max() <= vino_bound
    npu = edge.npu_partitions(path)
    assert npu["partitions"] == 1 and npu["selected"] == npu["total"], npu
    assert edge.gpu_delegate_compatible(path)
    # Every softmax keeps its own int8 grid: none is requantized to a
    # calibrated range a short review's weights would overflow.
    with open(path, "rb") as f:
        data = f.read()
    assert flatbuffer.keep_probability_ranges(data) == data


MICRO_NOT_WITHIN = pytest.mark.xfail(
    strict=True,
    reason="the microcontroller model is 3/256 from LiteRT under TFLM "
    "(issue #43 asks 2/256 of the imdb_edge file; docs/edge.md)",
)


@pytest.mark.parametrize(
    "name",
    [SHIPPED[0], pytest.param(SHIPPED[1], marks=MICRO_NOT_WITHIN)],
)
def test_shipped_file_within_the_issue_agreement_bounds(name, reviews):
    lite, micro, vino = on_targets(name, reviews)
    assert np.all((micro > 0.5) == (lite[:300] > 0.5))
    assert np.abs(micro - lite[:300]).max() <= 2 * STEP + 1e-6
    assert np.mean((vino > 0.5) == (lite > 0.5)) >= 0.99
    assert np.abs(vino - lite).max() <= 0.05


SHORT = [
    "Dull, slow and far too long.",
    "A wonderful film with brilliant acting.",
]
EXPLANATION_CLIPPED = pytest.mark.xfail(
    strict=True,
    reason="the int8 attention output (chunk weight times token weight) "
    "is calibrated on long reviews: weights above about 0.2, a review of "
    "3 words, are clipped (docs/edge.md)",
)


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize(
    "text",
    [*SHORT, pytest.param("A wonderful film.", marks=EXPLANATION_CLIPPED)],
)
def test_a_short_review_attention_sums_to_one(name, text):
    """A short review fills one chunk, which takes all the attention: each
    hop's weights sum to 1 within int8 steps (with the softmax requantized
    to the range calibration saw, they summed to about 0.6)."""
    from keras_attn import explain
    from keras_attn_runtime import LiteRTClassifier

    clf = LiteRTClassifier(os.path.join(MODELS, name))
    (result,) = explain.attend(clf, [text])
    np.testing.assert_allclose(result["attention"].sum(1), 1.0, atol=0.05)


def test_micro_model_is_within_its_bounds_through_tflm():
    from keras_attn_runtime import LiteRTClassifier

    folder = os.path.join(MODELS, "imdb_micro")
    path = os.path.join(folder, "model_int8.tflite")
    with open(os.path.join(folder, "metrics.json")) as f:
        metrics = json.load(f)
    assert os.path.getsize(path) <= 1 << 20
    tfds = pytest.importorskip("tensorflow_datasets")
    data = tfds.as_numpy(tfds.load("imdb_reviews", split="test", batch_size=-1))
    texts = [t.decode() for t in data["text"]]
    assert len(texts) == 25_000
    ids = LiteRTClassifier(path).tokenizer(texts)
    micro = edge.MicroModel(path)
    probs = micro.run(ids)["probability"][:, 0]
    accuracy = float(np.mean((probs > 0.5) == (data["label"] > 0.5)))
    assert accuracy >= 0.87
    assert accuracy == metrics["test_accuracy_tflm"]  # the shipped figure
    assert micro.arena_bytes() <= 256 << 10
    assert micro.arena_bytes() == metrics["arena_bytes"]
    tflm = metrics["edge_targets"]["tflm"]
    assert tflm["op_resolver"] == edge.micro_op_resolver(path)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_export_matrix_full_integer_rows_run_on_every_target(name, tmp_path):
    # Each runtime rounds its int8 ops its own way: measured up to 4
    # output steps apart for TFLM and 19 for OpenVINO (the attention
    # weights of untrained MultiHeadPositional models), so the bound is
    # relative to the output's range, as the matrix's own int8 bound.
    from ai_edge_litert.interpreter import Interpreter

    calibration = RNG.integers(1, V, size=(32, T)).astype("int32")
    calibration[::2, 6:] = 0
    data = export.convert_tflite(
        BUILDERS[name](), quantize="int8", representative_data=calibration
    )
    path = str(tmp_path / f"{name}.tflite")
    with open(path, "wb") as f:
        f.write(data)
    for target in edge.TARGETS:
        assert edge.edge_problems(path, target) == [], target
    runner = Interpreter(model_path=path).get_signature_runner()
    (key,) = runner.get_input_details()
    lite = {}
    for row in IDS:
        for out, value in runner(**{key: row[None]}).items():
            lite.setdefault(out, []).append(value)
    lite = {k: np.concatenate(v) for k, v in lite.items()}
    runs_on = [edge.MicroModel(path).run(IDS)]
    if _int8_dot_products() is not False:  # OpenVINO's bound: VNNI's
        runs_on.append(edge.openvino_run(path, IDS))
    for runs in runs_on:
        for out, want in lite.items():
            scale = max(float(np.abs(want).max()), 1e-6)
            assert np.abs(runs[out] - want).max() / scale <= 0.1, out
    npu = edge.npu_partitions(path)
    assert npu["partitions"] == 1 and npu["selected"] == npu["total"], npu
    assert edge.gpu_delegate_compatible(path)
