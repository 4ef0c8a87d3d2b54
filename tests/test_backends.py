"""The layer test suite again, on the JAX backend (CPU), in a subprocess.

Keras fixes its backend at import, so the JAX run needs a fresh process.
Skipped when JAX is not installed (it is in the `dev` extra), or when this
process already runs on JAX (the suite is then running directly).
"""

import importlib.util
import os
import subprocess
import sys

import keras
import pytest

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYER_SUITE = [
    "tests/test_attention.py",
    "tests/test_structured_self_attention.py",
    "tests/test_multi_head_positional.py",
    "tests/test_positional.py",
    "tests/test_bad_input.py",
    "tests/test_precision.py",
    "tests/test_ops.py",
    "tests/test_keras_parity_bugs.py",
]


@pytest.mark.skipif(
    importlib.util.find_spec("jax") is None, reason="jax is not installed"
)
@pytest.mark.skipif(
    keras.backend.backend() == "jax", reason="already running on JAX"
)
def test_layer_suite_passes_on_jax():
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
        + LAYER_SUITE,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout and " failed" not in proc.stdout, tail
