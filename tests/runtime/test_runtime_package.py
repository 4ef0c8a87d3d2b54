"""The edge runtime installs and runs where there is no Keras and no
TensorFlow: a fresh venv holding only NumPy and `ai-edge-litert`, the
`keras-attn-runtime` wheel built from `runtime/`, and the shipped IMDB
LiteRT files scored there exactly as in this process. Slow tier (it
pip-installs packages into the venv; no data is downloaded)."""

import json
import os
import subprocess

import numpy as np
import pytest

from tests.paths import ROOT
from tests.venvs import build_wheel, fresh_venv, pip_install

pytestmark = pytest.mark.slow

FILES = [
    "saved_models/imdb_edge/model_full_int8.tflite",
    "saved_models/imdb_ssa/model_dynamic_int8.tflite",  # the BiLSTM + SSA
]
TEXTS = [
    "A wonderful film, moving and funny.",
    "Dull, far too long, and the acting is awful.",
    "École Été: un film?",
]
SCRIPT = """
import json, sys
for banned in ("keras", "tensorflow"):
    try:
        __import__(banned)
    except ImportError:
        pass
    else:
        raise SystemExit(banned + " is importable in the runtime venv")
from keras_attn_runtime import LiteRTClassifier
out = {}
for path in json.loads(sys.argv[1]):
    probs = LiteRTClassifier(path).predict(json.loads(sys.argv[2]))
    out[path] = [float(p) for p in probs["probability"].ravel()]
print(json.dumps(out))
"""


def test_runtime_scores_shipped_files_without_keras_or_tensorflow(tmp_path):
    files = [os.path.join(ROOT, f) for f in FILES]
    if not all(os.path.isfile(f) for f in files):
        pytest.skip("shipped LiteRT files are absent")
    python = fresh_venv(str(tmp_path / "venv"))
    wheels = str(tmp_path / "wheels")
    build_wheel(os.path.join(ROOT, "runtime"), wheels)
    pip_install(python, "numpy", "ai-edge-litert")
    pip_install(
        python,
        "--no-deps",
        *(os.path.join(wheels, w) for w in os.listdir(wheels)),
    )
    run = subprocess.run(
        [python, "-c", SCRIPT, json.dumps(files), json.dumps(TEXTS)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=str(tmp_path),
    )
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    from keras_attn_runtime import LiteRTClassifier

    for path in files:
        want = LiteRTClassifier(path).predict(TEXTS)["probability"].ravel()
        np.testing.assert_allclose(got[path], want, atol=1e-6)
