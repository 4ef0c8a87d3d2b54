"""LiteRT's C++ logs stay off the terminal: opening and running a file
wrote some forty lines to standard error (its environment, the
accelerators it tried, their teardown at exit), and an export sixty.
What a failure logs is kept, as a note of its exception."""

import os
import subprocess
import sys

import pytest

from keras_attn_runtime import native_logs
from tests.paths import ROOT

MICRO = os.path.join(ROOT, "saved_models", "imdb_micro", "model_int8.tflite")
SNIPPET = f"""
from keras_attn_runtime import LiteRTClassifier
print(LiteRTClassifier({MICRO!r}).predict("A wonderful film.")["probability"])
"""


def run(code, **env):
    environ = {k: v for k, v in os.environ.items() if k != native_logs.ENV}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**environ, "PYTHONPATH": ROOT, **env},
        timeout=300,
    )


def test_the_runtime_writes_nothing_to_standard_error():
    pytest.importorskip("ai_edge_litert")
    if not os.path.isfile(MICRO):
        pytest.skip("no shipped imdb_micro file")
    done = run(SNIPPET)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("[[")
    assert done.stderr == ""
    shown = run(SNIPPET, **{native_logs.ENV: "1"})
    assert "LiteRT environment" in shown.stderr  # there to be shown


def test_a_failure_keeps_what_was_logged_as_a_note():
    code = """
import os
from keras_attn_runtime import native_logs
try:
    with native_logs.captured():
        os.write(2, b"the op FOO is not supported\\n")
        raise RuntimeError("conversion failed")
except RuntimeError as err:
    print("|".join(err.__notes__))
with native_logs.captured():
    os.write(2, b"chatter\\n")
print("after")
"""
    done = run(code)
    assert done.returncode == 0, done.stderr
    assert "the op FOO is not supported" in done.stdout
    assert done.stdout.strip().endswith("after")
    assert done.stderr == ""  # neither the chatter nor the failure's log


def test_captures_nest():
    with native_logs.captured(), native_logs.captured():
        os.write(2, b"")
    assert native_logs._DEPTH == [0]
