"""The README is a front page: what the project is, the two commands, and
where each kind of user starts. Its reference material lives in docs/,
whose code blocks `tests/test_docs_code.py` runs. And an export through
the Python API writes nothing to the console beyond TensorFlow's own
start-up (0.2.0's wrote 59 lines)."""

import os
import re
import subprocess
import sys

import pytest

from tests.paths import ROOT

README = os.path.join(ROOT, "README.md")
START_PAGES = [
    "docs/start-layers.md",
    "docs/start-serving.md",
    "docs/start-edge.md",
    "docs/start-batch.md",
]


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_the_front_page_stays_a_front_page():
    text = read(README)
    assert len(text.splitlines()) <= 100
    assert "```python" not in text  # code to read lives in the guides
    block = r"## Quick start\n\n```bash\n(.*?)```"
    (quick_start,) = re.findall(block, text, re.S)
    commands = [
        line
        for line in quick_start.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert len(commands) == 2, commands
    assert commands[0].endswith("&& keras-attn")
    assert "python -m pytest -m slow" in commands[1]


def test_each_kind_of_user_has_a_first_page_that_runs():
    text = read(README)
    from tests.docs_blocks import runnable

    for page in START_PAGES:
        assert f"]({page})" in text, page
        assert os.path.isfile(os.path.join(ROOT, page)), page
        assert any(b.expected is not None for b in runnable(page)), page


@pytest.mark.slow
def test_an_export_writes_nothing_beyond_tensorflows_start_up(tmp_path):
    env = {
        **{
            k: v for k, v in os.environ.items() if k != "KERAS_ATTN_NATIVE_LOGS"
        },
        "PYTHONPATH": ROOT,
    }
    imports = subprocess.run(
        [sys.executable, "-c", "import keras, keras_attn"],
        capture_output=True,
        text=True,
        env=env,
    )
    model = os.path.join(ROOT, "saved_models", "imdb_ssa", "model.keras")
    script = (
        "import keras\n"
        "from keras_attn import export\n"
        "from keras_attn_runtime import LiteRTClassifier\n"
        f"model = keras.models.load_model({model!r})\n"
        "export.export_text_model(model, saved_model='out_sm', "
        "tflite='m.tflite')\n"
        "print(LiteRTClassifier('m.tflite').predict('A wonderful film.')"
        "['probability'])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    noise = len(proc.stderr.splitlines()) - len(imports.stderr.splitlines())
    assert noise <= 0, proc.stderr[-3000:]
    assert (tmp_path / "m.tflite").is_file()
    assert (tmp_path / "out_sm" / "saved_model.pb").is_file()
