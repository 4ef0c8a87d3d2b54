"""ARM64, the phones' CPU: LiteRT's own aarch64 build, under QEMU's
user-mode emulation, answers as the x86 build does on the shipped files.

The same script runs `keras_attn_runtime` (NumPy and LiteRT only) on the
aarch64 Python of `tools/arm64_root.sh` and on this machine's, over a
sample of test reviews and sentences. Bounds: the full-integer files'
probabilities bit-identical, and the edge file's attention maps; the
micro file's attention maps within one step of its int8 grid on at most
0.1% of the values (measured: 40 of 240,000, in one hop of one review);
the translator's translations identical; the dynamic-range int8 BiLSTM's
probabilities within 2/256.

One CPU model, Arm's Neoverse-N1 (LiteRT's int8 dot-product kernels).
Debian 12's QEMU 7.2 miscomputes with `-cpu max` (its SME emulation flips
labels); CPU models without SME give bit-identical answers. Skips, saying
why, where the emulator or the aarch64 folder is missing.
"""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.paths import ROOT

pytestmark = pytest.mark.slow

ARM64 = os.environ.get("KERAS_ATTN_ARM64", os.path.join(ROOT, ".arm64"))
CPU = "neoverse-n1"
MODELS = os.path.join(ROOT, "saved_models")
FULL_INTEGER = (
    "imdb_edge/model_full_int8.tflite",
    "imdb_micro/model_int8.tflite",
)
DYNAMIC = ("imdb_ssa/model_dynamic_int8.tflite",)
TRANSLATOR = "translation_en_fr/model.tflite"

CHILD = """
import sys
sys.path[:0] = sys.argv[3:]
import numpy as np
from keras_attn_runtime import LiteRTClassifier, LiteRTTranslator

# XNNPACK: the kernels whose answers agree bit for bit across the two
# architectures. LiteRT's builtin kernels (the runtime's default, the same
# answer every time on one machine) take other code paths on each: the
# imdb_edge attention moved by up to 0.0024 in 41.5% of its values.
KERNELS = "xnnpack"
request = np.load(sys.argv[1], allow_pickle=False)
out = {}
for key in request.files:
    kind, path = key.split(":", 1)
    if kind == "classifier":
        clf = LiteRTClassifier(path, num_threads=1, cpu_kernels=KERNELS)
        got = clf.predict([str(t) for t in request[key]])
        out["probability:" + path] = got["probability"]
        out["attention:" + path] = got["attention"]
    else:
        lite = LiteRTTranslator(path, num_threads=1, cpu_kernels=KERNELS)
        out["translation:" + path] = np.array(
            [lite.translate(str(t), truncate=True) for t in request[key]]
        )
np.savez(sys.argv[2], **out)
"""


def emulator():
    """The command that starts the aarch64 Python, or a skip naming what
    is missing."""
    qemu = shutil.which("qemu-aarch64-static")
    python = os.path.join(ARM64, "root", "usr", "bin", "python3.11")
    if qemu is None:
        pytest.skip(
            "qemu-aarch64-static is not installed (Debian's "
            "qemu-user-static): run `bash tools/arm64_root.sh DIR`"
        )
    if not (
        os.path.isfile(python)
        and os.path.isdir(os.path.join(ARM64, "site", "ai_edge_litert"))
    ):
        pytest.skip(
            f"no aarch64 Python and LiteRT at {ARM64!r}: run `bash "
            f"tools/arm64_root.sh {ARM64}` (or set KERAS_ATTN_ARM64)"
        )
    return [qemu, "-L", os.path.join(ARM64, "root"), "-cpu", CPU, python]


def samples():
    import tensorflow_datasets as tfds

    data = tfds.load("imdb_reviews", split="test", as_supervised=True)
    texts = [t.decode("utf-8") for t, _ in tfds.as_numpy(data.take(2000))]
    rng = np.random.default_rng(0)
    reviews = [texts[i] for i in rng.choice(len(texts), 60, replace=False)]
    with open(
        os.path.join(ROOT, "..", "shared", "data", "translation", "pairs.tsv"),
        encoding="utf-8",
    ) as f:
        lines = f.read().splitlines()
    sentences = [
        lines[i].split("\t")[0]
        for i in rng.choice(len(lines), 12, replace=False)
    ]
    return reviews, sentences


def run(command, request, out, paths):
    done = subprocess.run(
        [*command, "-c", CHILD, request, out, *paths],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def test_the_shipped_files_answer_on_arm64_as_on_x86(tmp_path):
    command = emulator()
    reviews, sentences = samples()
    request = {}
    for name in FULL_INTEGER:
        request[f"classifier:{os.path.join(MODELS, name)}"] = np.array(reviews)
    for name in DYNAMIC:  # the BiLSTM is slow under emulation: a third
        request[f"classifier:{os.path.join(MODELS, name)}"] = np.array(
            reviews[:20]
        )
    request[f"translator:{os.path.join(MODELS, TRANSLATOR)}"] = np.array(
        sentences
    )
    path = str(tmp_path / "request.npz")
    np.savez(path, **request)
    arm = run(
        command,
        path,
        str(tmp_path / "arm.npz"),
        [os.path.join(ARM64, "site"), ROOT],
    )
    x86 = run([sys.executable], path, str(tmp_path / "x86.npz"), [ROOT])
    assert sorted(arm) == sorted(x86)
    for key, want in x86.items():
        got = arm[key]
        if key.startswith("translation:"):
            assert got.tolist() == want.tolist(), key
        elif any(name in key for name in FULL_INTEGER):
            if key.startswith("probability:") or FULL_INTEGER[0] in key:
                np.testing.assert_array_equal(got, want, err_msg=key)
            else:
                # The micro file's attention map: measured, one hop of one
                # review of the 60 (40 of 240,000 values) one step of its
                # int8 output grid (0.00092) apart; its probabilities are
                # bit-identical.
                moved = np.abs(got - want)
                assert moved.max() <= 1 / 1024 and (moved > 0).mean() <= 1e-3
        else:  # dynamic-range int8: float activations, other kernels
            assert got.shape == want.shape, key
            if key.startswith("probability:"):
                assert np.abs(got - want).max() <= 2 / 256, key
    # The sample is not trivial: labels of both kinds, real translations.
    edge = x86[f"probability:{os.path.join(MODELS, FULL_INTEGER[0])}"]
    assert 0 < (edge > 0.5).mean() < 1
    assert all(x86[f"translation:{os.path.join(MODELS, TRANSLATOR)}"])
