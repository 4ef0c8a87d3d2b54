"""The next Keras, checked before our users get it (slow tier).

`.ci/next-versions.txt` pins the next Keras build (a `keras-nightly`
from the package registry); the pin moves deliberately. It is installed
with no dependencies into a folder of its own that goes first on
`PYTHONPATH`, so a subprocess imports it in place of the installed
Keras, with everything else unchanged. There the backend-agnostic layer
suite runs, with the Keras behaviours we stand on
(`tests/test_upstream.py`) and the recipes' models, and the shipped IMDB
model's `.keras` file must answer as its SavedModel does on 200 test
reviews (`tests/shipped_parity.py`). An upstream change that breaks us
fails here first.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.paths import ROOT
from tests.suites import LAYER_SUITE, backend_env

pytestmark = pytest.mark.slow

PINS = os.path.join(ROOT, ".ci", "next-versions.txt")
UPSTREAM_SUITE = [
    "tests/test_upstream.py",
    # LiteRT files of a BiLSTM model against Keras: the masks by name.
    "tests/runtime/test_compiled_model.py",
    "tests/recipes/test_imdb_example.py",
    "tests/recipes/test_translation_example.py",
]


def pins():
    with open(PINS, encoding="utf-8") as f:
        lines = [line.split("#")[0].strip() for line in f]
    return [line for line in lines if line]


def next_keras_pin():
    (pin,) = [p for p in pins() if p.startswith("keras-nightly==")]
    return pin


@pytest.fixture(scope="module")
def next_keras(tmp_path_factory):
    """A folder holding the pinned next Keras alone, and its version."""
    folder = str(tmp_path_factory.mktemp("next_keras"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps"]
        + ["--target", folder, next_keras_pin()],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return folder, next_keras_pin().split("==")[1]


def run(folder, command, compile_cache, backend="tensorflow"):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [folder, ROOT, os.environ.get("PYTHONPATH", "")]
        ),
        **backend_env(backend, compile_cache),
    }
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True
    )


def test_the_pin_is_the_keras_the_subprocess_imports(next_keras, tmp_path):
    folder, version = next_keras
    done = run(
        folder,
        [sys.executable, "-c", "import keras; print(keras.version())"],
        tmp_path,
    )
    assert done.stdout.strip().splitlines()[-1] == version, done.stderr[-2000:]


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_layer_suite_on_the_next_keras(next_keras, backend, tmp_path):
    folder, _ = next_keras
    if backend == "jax":
        pytest.importorskip("jax")
    files = LAYER_SUITE + (UPSTREAM_SUITE if backend == "tensorflow" else [])
    done = run(
        folder,
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
        + ["-m", "not slow", *files],
        tmp_path,
        backend,
    )
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, tail
    assert " passed" in done.stdout and " failed" not in done.stdout, tail


def test_shipped_model_answers_as_its_saved_model_on_the_next_keras(
    next_keras, tmp_path
):
    folder, version = next_keras
    command = [sys.executable, "-m", "tests.shipped_parity", "200"]
    done = run(folder, command, tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["keras"] == version
    assert result["max_abs_dp"] <= 1e-4
    assert result["max_attention_on_padding"] == 0.0
