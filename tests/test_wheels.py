"""A wheel user outside the checkout: the `keras_attn` and
`keras-attn-models` wheels installed into a fresh venv, `keras-attn` run
there with no flags in an empty folder (0.2.0's wheel had no models and
ran the generated demo instead). Keras, TensorFlow and the other
dependencies come from this environment's site-packages on PYTHONPATH
(where the editable checkout is not visible: `.pth` files there are not
read), so the test installs nothing from the network. Slow tier."""

import os
import site
import subprocess

import pytest

from tests.venvs import build_wheel, fresh_venv, pip_install

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The distributions beside the main one: the trained models and the
# edge runtime, which `keras_attn` depends on.
PROJECTS = ("models", "runtime")


def run(cmd, **kwargs):
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=900, **kwargs
    )


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("wheels"))
    for project in (ROOT, *(os.path.join(ROOT, p) for p in PROJECTS)):
        build_wheel(project, out, isolated=False)
    return {
        name.split("-")[0]: os.path.join(out, name) for name in os.listdir(out)
    }


def venv_with(tmp_path, *wheel_paths):
    python = fresh_venv(str(tmp_path / "venv"))
    pip_install(python, "--no-deps", *wheel_paths)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(site.getsitepackages()),
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    env.pop("KERAS_ATTN_MODELS", None)
    return python, env


def test_a_wheel_user_runs_the_main_job(wheels, tmp_path):
    python, env = venv_with(
        tmp_path,
        wheels["keras_attn"],
        wheels["keras_attn_models"],
        wheels["keras_attn_runtime"],
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    main = run([python, "-m", "keras_attn_cli"], cwd=empty, env=env)
    assert main.returncode == 0, main.stderr[-2000:]
    assert str(tmp_path / "venv") in main.stdout  # the installed models
    assert "Je suis" in main.stdout or "→" in main.stdout, main.stdout
    assert list(empty.iterdir()) == []


def test_without_models_a_verb_says_how_to_get_them(wheels, tmp_path):
    python, env = venv_with(
        tmp_path, wheels["keras_attn"], wheels["keras_attn_runtime"]
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    for args in ([], ["classify", "A wonderful film."], ["translate", "Hi."]):
        done = run([python, "-m", "keras_attn_cli", *args], cwd=empty, env=env)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        said = done.stderr
        assert "keras-attn-models" in said and "pip install ./models" in said
        assert done.stderr.count("\n") == 1


def test_each_file_has_one_distribution(wheels):
    """The main wheel ships `keras_attn` and its CLI and requires the
    runtime's distribution, which alone ships `keras_attn_runtime`."""
    import zipfile

    def tops(wheel):
        names = zipfile.ZipFile(wheels[wheel]).namelist()
        return {n.split("/")[0] for n in names if ".dist-info" not in n}

    assert tops("keras_attn") == {"keras_attn", "keras_attn_cli"}
    assert tops("keras_attn_runtime") == {"keras_attn_runtime"}
    metadata = [
        n
        for n in zipfile.ZipFile(wheels["keras_attn"]).namelist()
        if n.endswith(".dist-info/METADATA")
    ]
    text = zipfile.ZipFile(wheels["keras_attn"]).read(metadata[0]).decode()
    assert "Requires-Dist: keras-attn-runtime" in text


def test_the_documented_serve_install_serves_every_shipped_model(tmp_path):
    """docs/serving.md's install, as a new user runs it, in a fresh venv
    (dependencies from the package index, or pip's cache): `pip install
    ./runtime ".[cpu,serve]"` and `tensorflow-serving-api` without its
    dependencies give one TensorFlow (tensorflow-cpu), and `keras-attn
    serve` answers for every shipped model over REST and gRPC."""
    import json
    import signal
    import time

    from tests.serving.live import free_port, get, post

    python = fresh_venv(str(tmp_path / "venv"))
    pip_install(python, os.path.join(ROOT, "runtime"), f"{ROOT}[cpu,serve]")
    pip_install(python, "--no-deps", "tensorflow-serving-api>=2.21,<2.22")
    listed = run([python, "-m", "pip", "list", "--format", "json"])
    names = {
        p["name"].lower().replace("_", "-") for p in json.loads(listed.stdout)
    }
    assert "tensorflow-cpu" in names and "tensorflow" not in names, names
    port, grpc_port = free_port(), free_port()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("PYTHONPATH", None)
    # Appended to (O_APPEND), so that reading it here moves no write.
    log = open(tmp_path / "serve.log", "a+")  # noqa: SIM115 (read below)
    server = subprocess.Popen(
        [python, "-m", "keras_attn_cli", "--models"]
        + [os.path.join(ROOT, "saved_models"), "serve", "--port", str(port)]
        + ["--grpc-port", str(grpc_port)],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.time() + 300
        while time.time() < deadline and server.poll() is None:
            try:
                if get(port, "/v2/health/ready")[0] == 200:
                    break
            except OSError:
                time.sleep(1)
        log.seek(0)
        assert server.poll() is None, log.read()[-3000:]
        served = sorted(os.listdir(os.path.join(ROOT, "saved_models")))
        for name in served:
            status, answer = post(port, name, {"instances": ["A fine film."]})
            assert status == 200 and len(answer["predictions"]) == 1, name
        log.seek(0)
        assert f"gRPC 127.0.0.1:{grpc_port} (TensorFlow Serving" in log.read()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        log.close()
