"""The package boundary: what `import keras_attn` needs and gives."""

import importlib.util
import os
import subprocess
import sys

import pytest

import keras_attn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_public_names():
    for name in keras_attn.__all__:
        assert getattr(keras_attn, name) is not None, name


def test_the_three_distributions_say_one_version():
    """The library, the runtime and the models are released together."""
    import re

    import keras_attn_runtime

    versions = {"keras_attn": keras_attn.__version__}
    versions["keras_attn_runtime"] = keras_attn_runtime.__version__
    for folder in ("runtime", "models"):
        with open(os.path.join(ROOT, folder, "pyproject.toml")) as f:
            found = re.search(r'^version = "([^"]+)"', f.read(), re.M)
        versions[folder] = found.group(1)
    assert len(set(versions.values())) == 1, versions


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("jax") is None, reason="jax is not installed"
)
def test_import_needs_only_keras_and_jax():
    """TensorFlow blocked: the layers, the runtime and the generic tooling
    modules still import (only export/trust calls need TensorFlow)."""
    script = (
        "import sys\n"
        "sys.modules['tensorflow'] = None\n"
        "import numpy as np, keras, keras_attn\n"
        "from keras_attn import explain, export, trust\n"
        "import keras_attn_runtime\n"
        "from keras_attn_cli import commands\n"
        "from keras_attn.seq2seq import AttentionDecoder, beam_search\n"
        "layer = keras_attn.Attention()\n"
        "q, v = np.ones((1, 2, 3), 'f'), np.ones((1, 4, 3), 'f')\n"
        "out = layer(q, v)\n"
        "print(keras.backend.backend(), tuple(out.shape))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ROOT, "KERAS_BACKEND": "jax"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "jax (1, 2, 3)"
