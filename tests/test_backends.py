"""The layer test suite again, on JAX and on PyTorch (CPU), in subprocesses.

Keras fixes its backend at import, so each run needs a fresh process.
Skipped when the backend is not installed (JAX is in the `dev` extra; CI
installs PyTorch's CPU build, `pip install torch==2.13.0`), or when this
process already runs on it.
"""

import importlib.util
import os
import subprocess
import sys

import keras
import pytest

from tests.suites import LAYER_SUITE, backend_env

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(backend, files, compile_cache, marks="not slow", **env):
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
    proc = subprocess.run(
        command + ["-m", marks] + files,
        cwd=ROOT,
        env={**os.environ, **backend_env(backend, compile_cache), **env},
        capture_output=True,
        text=True,
    )
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout and " failed" not in proc.stdout, tail


def test_float64_on_jax_with_x64(tmp_path):
    """JAX computes float64 only with x64 on: its own process."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed")
    _run("jax", ["tests/layers/test_float64.py"], tmp_path, JAX_ENABLE_X64="1")


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_layer_suite_passes_on(backend, tmp_path):
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed")
    if keras.backend.backend() == backend:
        pytest.skip(f"already running on {backend}")
    # Every test of the suite, the slow tier's included (they train and
    # save models), but the distribution launches, which are TensorFlow's.
    distribute = "tests/training/test_distribute.py"
    suite = [f for f in LAYER_SUITE if f != distribute]
    _run(backend, suite, tmp_path, "slow or not slow")
    _run(backend, [distribute], tmp_path)
