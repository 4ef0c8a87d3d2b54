"""`examples/` holds keras-io tutorials that stand alone; `recipes/` the
pipelines behind the shipped models. Fast: the structure rules. Slow: each
tutorial runs end to end on a small slice of IMDB (`$TFDS_DATA_DIR`)."""

import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
NAMES = sorted(f[:-3] for f in os.listdir(EXAMPLES) if f.endswith(".py"))
RECIPES = sorted(
    f[:-3]
    for f in os.listdir(os.path.join(ROOT, "recipes"))
    if f.endswith(".py")
)


def source(name):
    with open(os.path.join(EXAMPLES, name + ".py"), encoding="utf-8") as f:
        return f.read()


@pytest.mark.parametrize("name", NAMES)
def test_an_example_imports_no_other_example_and_no_recipe(name):
    tree = ast.parse(source(name))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & (set(NAMES) | set(RECIPES)), imported
    assert "sys.path" not in source(name)


@pytest.mark.parametrize("name", NAMES)
def test_an_example_is_a_tutorial_that_reads_no_fixed_data_path(name):
    text = source(name)
    header = ast.get_docstring(ast.parse(text)) or ""
    for field in ("Title:", "Author:", "Description:"):
        assert field in header, (name, field)
    assert "shared/data" not in text and "../" not in text


def run(*args):
    env = {**os.environ, "KERAS_BACKEND": "tensorflow"}
    result = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


needs_imdb = pytest.mark.skipif(
    not os.environ.get("TFDS_DATA_DIR"),
    reason="set TFDS_DATA_DIR to the offline IMDB copy (../shared/data)",
)


@pytest.mark.slow
@needs_imdb
def test_the_transformer_tutorial_runs_and_its_model_reloads():
    out = run("examples/imdb_transformer.py", "--limit", "200", "--epochs", "1")
    assert "test accuracy on 200 reviews" in out
    assert "same predictions: True" in out
    assert "most read:" in out


@pytest.mark.slow
@needs_imdb
def test_the_self_attention_tutorial_runs_and_its_model_reloads():
    out = run(
        "examples/imdb_self_attention.py", "--limit", "200", "--epochs", "1"
    )
    assert "test accuracy on 200 reviews" in out
    assert "same attention: True" in out
    assert out.count("\nhop ") == 4


@pytest.mark.slow
def test_the_length_extrapolation_tutorial_runs(tmp_path):
    out = tmp_path / "extrapolation.json"
    run("examples/length_extrapolation.py", "--steps", "2", "--out", str(out))
    assert out.stat().st_size > 0


@pytest.mark.parametrize("name", ["imdb_self_attention", "imdb_transformer"])
def test_without_imdb_an_example_says_what_to_set_at_once(name, tmp_path):
    # Offline and without `$TFDS_DATA_DIR`, `tfds.load` retried a download
    # for minutes.
    done = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, name + ".py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TFDS_DATA_DIR": str(tmp_path / "empty")},
    )
    assert done.returncode == 1, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("IMDB is not prepared in") and "TFDS_DATA_DIR" in last
    )
