"""Versions rolled in and out of a live `keras-attn serve` under load, as
TensorFlow Serving's operators do it: a version renamed into place takes
the unversioned requests within a poll and its load, a broken one and a
tampered signed one are refused while the version before answers, and
TensorFlow Serving's model config file serves its models. Not one
request fails. Slow tier."""

import json
import os
import signal
import threading
import time

import pytest

from tests.serving.live import (
    free_port,
    get,
    output_all,
    post,
    request,
    scorer_model,
)
from tests.serving.live import start as start_server

pytestmark = pytest.mark.slow
pytest.importorskip("kserve")

TEXT = "abcd"  # each version answers len(TEXT) times its number


def rename_in(base, number, write):
    """Version `number` written whole under a hidden name, then renamed
    into place (the way docs/serving.md places one)."""
    hidden = os.path.join(base, f".{number}.partial")
    write(hidden)
    os.rename(hidden, os.path.join(base, str(number)))


class Clients:
    """`count` threads sending unversioned `:predict` until stopped, each
    answer kept as `(time, status, score)`."""

    def __init__(self, port, count=8):
        self.port, self.answers, self.stop = port, [], threading.Event()
        self.threads = [
            threading.Thread(target=self._send, daemon=True)
            for _ in range(count)
        ]
        for thread in self.threads:
            thread.start()

    def _send(self):
        while not self.stop.is_set():
            try:
                status, answer = post(
                    self.port, "scorer", {"instances": [TEXT]}
                )
                score = answer["predictions"][0] if status == 200 else answer
            except OSError as err:  # a refused or dropped connection
                status, score = type(err).__name__, None
            self.answers.append((time.monotonic(), status, score))

    def first(self, score, timeout=60):
        """When the first answer `score` came, waiting up to `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, status, got in list(self.answers):
                if status == 200 and got == score:
                    return at
            time.sleep(0.05)
        raise AssertionError(f"no answer {score} in {timeout} s")

    def finish(self):
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)
        failed = [a for a in self.answers if a[1] != 200]
        assert not failed, failed[:5]
        return self.answers


def status_of(port, name="scorer"):
    _, answer = get(port, f"/v1/models/{name}")
    return {
        s["version"]: (s["state"], s["status"]["error_message"])
        for s in answer["model_version_status"]
    }


def grpc_states(grpc_port, name="scorer"):
    """`{version: (state, error message)}` from TensorFlow Serving's gRPC
    `GetModelStatus`."""
    import grpc
    from tensorflow_serving.apis import (
        get_model_status_pb2,
        model_service_pb2_grpc,
    )

    states = get_model_status_pb2.ModelVersionStatus.State
    call = get_model_status_pb2.GetModelStatusRequest()
    call.model_spec.name = name
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        answer = stub.GetModelStatus(call, timeout=60)
    return {
        s.version: (states.Name(s.state), s.status.error_message)
        for s in answer.model_version_status
    }


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, output_all(proc)[-3000:]


def test_a_version_rolled_in_under_load_answers_and_none_fails(tmp_path):
    pytest.importorskip("tensorflow_serving")
    base = tmp_path / "scorer"
    scorer_model(base / "1", 1)
    proc, port = start_server(str(base))
    clients = Clients(port)
    try:
        clients.first(4.0)
        placed = time.monotonic()
        rename_in(base, 2, lambda path: scorer_model(path, 2))
        swapped = clients.first(8.0) - placed
        # Within a poll (1 s), the settling look and the load.
        assert swapped < 30, swapped
        print(f"rename to the first answer of version 2: {swapped:.2f} s")
        assert status_of(port) == {"2": ("AVAILABLE", "")}

        # A broken version: one line, END in the status, 2 still answers.
        def broken(path):
            os.makedirs(path)
            with open(os.path.join(path, "saved_model.pb"), "wb") as f:
                f.write(b"not a graph")

        rename_in(base, 3, broken)
        deadline = time.monotonic() + 30
        while "3" not in status_of(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        states = status_of(port)
        assert states["2"] == ("AVAILABLE", "") and states["3"][0] == "END"
        answers = clients.finish()
        assert answers[-1][2] == 8.0
        status, answer = request(
            port, "GET", "/v2/models/scorer/versions/2/ready"
        )
        assert status == 200, answer
        status, answer = request(
            port, "GET", "/v2/models/scorer/versions/1/ready"
        )
        assert status == 404 and "no version '1'" in answer["error"]
        # gRPC's status says the same as REST's, at the same moment.
        assert grpc_states(proc.grpc_port) == {
            2: ("AVAILABLE", ""),
            3: ("END", states["3"][1]),
        }
    finally:
        clients.stop.set()
        stop(proc)
    log = output_all(proc)
    assert "scorer: serving versions [2] (was [1])" in log
    warnings = [line for line in log.splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "scorer version 3 not loaded" in warnings[0]


def test_a_tampered_version_is_refused_and_the_one_before_answers(tmp_path):
    pytest.importorskip("model_signing")
    from keras_attn_runtime import signing
    from tests.keys import keys

    private, public, _ = keys(tmp_path, "signer")
    base = tmp_path / "scorer"
    signing.sign(scorer_model(base / "1", 1), private)

    def tampered(path):
        scorer_model(path, 2)
        signing.sign(path, private)
        weights = os.path.join(path, "variables", "variables.index")
        with open(weights, "ab") as f:
            f.write(b"\0")

    rename_in(base, 2, tampered)
    # At start: refused, one line naming the file, nothing served.
    done = start_exit(str(base), "--require-signature", public)
    assert done[0] == 2 and "variables.index changed after signing" in done[1]
    os.rename(base / "2", tmp_path / "set_aside")
    proc, port = start_server(str(base), "--require-signature", public)
    clients = Clients(port, count=4)
    try:
        clients.first(4.0)
        os.rename(tmp_path / "set_aside", base / "2")
        deadline = time.monotonic() + 30
        while "2" not in status_of(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        state, message = status_of(port)["2"]
        assert state == "END" and "changed after signing" in message
        answers = clients.finish()
        assert {score for _, _, score in answers} == {4.0}
    finally:
        clients.stop.set()
        stop(proc)


def start_exit(*args):
    """`(exit status, output)` of a `keras-attn serve` that ends by
    itself."""
    import subprocess
    import sys

    from tests.paths import ROOT

    done = subprocess.run(
        [sys.executable, "-m", "keras_attn_cli", "serve", *args]
        + ["--port", str(free_port()), "--grpc-port", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, done.stderr


CONFIG = """
model_config_list {{
  config {{
    name: "scorer"
    base_path: "{scorer}"
    model_platform: "tensorflow"
    model_version_policy {{ all {{}} }}
    version_labels {{ key: "stable" value: 1 }}
    version_labels {{ key: "canary" value: 2 }}
  }}
  {more}
}}
"""


def test_a_tensorflow_serving_config_file_serves_its_models(tmp_path):
    pytest.importorskip("tensorflow_serving")
    scorer = tmp_path / "scorer"
    for number in (1, 2):
        scorer_model(scorer / str(number), number)
    scorer_model(tmp_path / "tripled" / "1", 3)
    config = tmp_path / "models.config"
    config.write_text(CONFIG.format(scorer=scorer, more=""))
    proc, port = start_server(
        "--model-config-file",
        str(config),
        "--model-config-file-poll-wait-seconds",
        "1",
    )
    try:
        assert status_of(port) == {
            "2": ("AVAILABLE", ""),
            "1": ("AVAILABLE", ""),
        }
        body = json.dumps({"instances": [TEXT]}).encode()
        for label, score in (("stable", 4.0), ("canary", 8.0)):
            route = f"/v1/models/scorer/labels/{label}:predict"
            status, answer = request(port, "POST", route, body)
            assert (status, answer["predictions"]) == (200, [score]), answer
        more = (
            f'config {{ name: "tripled" base_path: "{tmp_path / "tripled"}" }}'
        )
        config.write_text(CONFIG.format(scorer=scorer, more=more))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status, answer = post(port, "tripled", {"instances": [TEXT]})
            if status == 200:
                break
            time.sleep(0.2)
        assert (status, answer) == (200, {"predictions": [12.0]})
    finally:
        stop(proc)
