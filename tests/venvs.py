"""Wheels and fresh virtual environments for the slow install tests
(`test_runtime_package.py`, `test_wheels.py`)."""

import os
import subprocess
import sys
import venv


def _run(cmd, timeout=900):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def build_wheel(project, out, isolated=True):
    """Build `project`'s wheel (no dependencies) into the folder `out`."""
    flags = [] if isolated else ["--no-build-isolation"]
    _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *flags]
        + ["-w", out, project]
    )


def fresh_venv(folder):
    """A new venv at `folder` with pip; its Python's path."""
    venv.create(folder, with_pip=True)
    return os.path.join(folder, "bin", "python")


def pip_install(python, *args):
    """`pip install -q ARGS` with `python`'s pip."""
    _run([python, "-m", "pip", "install", "-q", *args])
