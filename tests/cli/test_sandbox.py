"""`keras-attn --sandbox`: a model that writes a file, and a process that
connects to a local server, both fail inside bubblewrap and work outside
it (so each check can fail). Skipped where bubblewrap is not installed
(`.ci/run` installs it); the missing-tool error is tested everywhere."""

import os
import shutil
import socket
import subprocess
import sys
import threading

import pytest

from keras_attn_cli import sandbox

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed"
)


def keras_attn(*args):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("KERAS_ATTN_SANDBOX", None)
    return subprocess.run(
        [sys.executable, "-m", "keras_attn_cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_a_missing_bwrap_gives_one_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert sandbox.run(["predict", "m", "x"]) == 2
    err = capsys.readouterr().err
    assert "apt-get install bubblewrap" in err and err.count("\n") == 1


@pytest.mark.slow
@needs_bwrap
def test_a_model_that_writes_a_file_fails_in_the_sandbox(tmp_path):
    import tensorflow as tf

    written = tmp_path / "pwned.txt"

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def evil(texts):
        with tf.control_dependencies([tf.io.write_file(str(written), "x")]):
            return {"probability": tf.zeros_like(texts, tf.float32)}

    module = tf.Module()
    module.f = evil
    model = str(tmp_path / "evil")
    tf.saved_model.save(module, model, signatures={"serving_default": evil})
    run = keras_attn("--sandbox", "predict", model, "hi", "--allow-unsafe-ops")
    assert run.returncode != 0 and not written.exists(), run.stderr
    # Outside the sandbox the same command writes the file.
    outside = keras_attn("predict", model, "hi", "--allow-unsafe-ops")
    assert written.exists(), outside.stderr


@needs_bwrap
def test_no_network_inside_the_sandbox():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]
    threading.Thread(target=lambda: server.accept(), daemon=True).start()
    probe = [
        sys.executable,
        "-c",
        f"import socket; socket.create_connection(('127.0.0.1', {port}), 5)",
    ]
    try:
        assert subprocess.run(probe, timeout=60).returncode == 0
        inside = subprocess.run(
            sandbox.bwrap_argv(probe), capture_output=True, timeout=60
        )
        assert inside.returncode != 0
    finally:
        server.close()


@needs_bwrap
def test_the_file_system_is_read_only_but_tmp(tmp_path):
    target = tmp_path / "x"
    probe = [sys.executable, "-c", f"open({str(target)!r}, 'w')"]
    assert subprocess.run(sandbox.bwrap_argv(probe)).returncode != 0
    assert not target.exists()
    scratch = [sys.executable, "-c", "open('/tmp/scratch', 'w').write('ok')"]
    assert subprocess.run(sandbox.bwrap_argv(scratch)).returncode == 0


def test_what_the_command_reads_below_tmp_is_bound_read_only(
    tmp_path, monkeypatch
):
    """A model (or a Python, a checkout) below `/tmp` was hidden by the
    sandbox's fresh `/tmp`: the command failed as if the model were
    missing. Each such path's folder is bound over it read-only, once."""
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/bwrap")
    model = tmp_path / "models" / "m.tflite"
    model.parent.mkdir()
    model.write_bytes(b"x")
    inner = tmp_path / "models" / "inner"
    inner.mkdir()
    argv = sandbox.bwrap_argv(["python"], [str(model.parent), str(inner)])
    binds = [argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind"]
    if str(tmp_path).startswith("/tmp/"):
        assert str(model.parent) in binds and str(inner) not in binds
        # Bound after the fresh /tmp, so over it.
        assert argv.index("--tmpfs") < argv.index(str(model.parent))
    assert "/usr" not in binds  # outside /tmp: already read-only
