"""The README's Python snippets run as written, each on its own (a
snippet that leans on an earlier one's imports fails: 0.2.0's export
snippet lacked `import keras`)."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def snippets(path):
    with open(path, encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)


def test_readme_has_snippets():
    assert len(snippets(os.path.join(ROOT, "README.md"))) >= 2


@pytest.mark.slow
def test_readme_snippets_run(tmp_path):
    os.symlink(os.path.join(ROOT, "saved_models"), tmp_path / "saved_models")
    printed = ""
    env = {
        **{
            k: v for k, v in os.environ.items() if k != "KERAS_ATTN_NATIVE_LOGS"
        },
        "PYTHONPATH": ROOT,
    }
    # What importing TensorFlow writes is TensorFlow's (and the user's
    # TF_CPP_MIN_LOG_LEVEL's); a snippet adds nothing to it (the export
    # snippet wrote 59 lines).
    imports = subprocess.run(
        [sys.executable, "-c", "import keras, keras_attn"],
        capture_output=True,
        text=True,
        env=env,
    )
    for script in snippets(os.path.join(ROOT, "README.md")):
        proc = subprocess.run(
            [sys.executable, "-c", script],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
        )
        assert proc.returncode == 0, script + proc.stderr[-3000:]
        if ".fit(" not in script:  # training logs are TensorFlow's own
            noise = len(proc.stderr.splitlines()) - len(
                imports.stderr.splitlines()
            )
            assert noise <= 0, proc.stderr[-3000:]
        printed += proc.stdout
    assert "(1, 4, 20)" in printed
    assert (tmp_path / "m.tflite").is_file()
    assert (tmp_path / "out_sm" / "saved_model.pb").is_file()


def test_the_front_page_stays_a_front_page():
    # At most 200 lines: reference material belongs in docs/.
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        assert len(f.read().splitlines()) <= 200
