"""The package boundary: what `import keras_attn` needs and gives."""

import ast
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
        "import importlib, pkgutil, keras_attn.seq2seq as s2s\n"
        "for m in pkgutil.walk_packages(s2s.__path__, s2s.__name__ + '.'):\n"
        "    importlib.import_module(m.name)  # every seq2seq module\n"
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


PACKAGES = ("keras_attn", "keras_attn_cli", "keras_attn_runtime")


def private_imports(path):
    """`(line, text)` of each private name that `path` takes from another
    of our modules: `from m import _x`, or `m._x` where `m` was imported
    from our packages. A package's private modules (`layers/_sublayers`)
    are its own: importing one from its package is not counted."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    package = os.path.dirname(os.path.relpath(path, ROOT)).replace(os.sep, ".")
    found, names = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                private = alias.name.startswith("_")
                own_module = node.module == package and os.path.isfile(
                    os.path.join(ROOT, *package.split("."), alias.name + ".py")
                )
                if (
                    private
                    and not alias.name.startswith("__")
                    and not own_module
                ):
                    found.append(
                        (node.lineno, f"from {node.module} import {alias.name}")
                    )
                names.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    names.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and isinstance(node.value, ast.Name)
            and node.value.id in names
        ):
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return found


def library_files():
    """Every `.py` file of the three distributions' packages."""
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in sorted(files):
                if name.endswith(".py"):
                    yield os.path.join(folder, name)


def test_no_private_name_crosses_modules():
    # Each module's private names are its own: what another module needs
    # is public (named without "_"), so that a change to a private helper
    # is never a change to another module.
    crossing = [
        f"{os.path.relpath(path, ROOT)}:{line}: {text}"
        for path in library_files()
        for line, text in private_imports(path)
    ]
    assert not crossing, "\n".join(crossing)


def test_the_private_import_check_sees_both_forms(tmp_path):
    # The check above must be able to fail.
    folder = tmp_path / "keras_attn_cli"
    folder.mkdir()
    path = folder / "probe.py"
    path.write_text(
        "from keras_attn.export.litert import _freeze\n"
        "from keras_attn.export import litert\n"
        "litert._convert\n"
    )
    found = [text for _, text in private_imports(str(path))]
    assert found == [
        "from keras_attn.export.litert import _freeze",
        "litert._convert",
    ]


def long_functions(path, limit=80):
    """`(name, lines)` of the functions in `path` longer than `limit`
    lines, docstrings included."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_no_library_function_over_80_lines(tmp_path):
    found = [
        f"{os.path.relpath(path, ROOT)}: {fn} ({n} lines)"
        for path in library_files()
        for fn, n in long_functions(path)
    ]
    assert not found, "\n".join(found)
    probe = tmp_path / "probe.py"  # the check can fail
    probe.write_text("def f():\n" + "    x = 1\n" * 80)
    assert long_functions(str(probe)) == [("f", 81)]


def shipped_bytes(root):
    """The bytes of what `root`'s git tracks under `saved_models/` (the
    models' distribution): what an engine writes beside a model at run
    time (LiteRT-LM's `*.xnnpack_cache`, ignored by git) is not shipped.
    Outside a git checkout, every file but those git would ignore."""
    import subprocess

    folder = os.path.join(root, "saved_models")
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", "saved_models"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout.split(b"\0")
        paths = [os.path.join(root, p.decode()) for p in listed if p]
    except (OSError, subprocess.CalledProcessError):
        paths = [
            os.path.join(d, n)
            for d, _, names in os.walk(folder)
            for n in names
            if not n.endswith(".xnnpack_cache")
        ]
    return sum(os.path.getsize(p) for p in paths if os.path.isfile(p))


def test_the_shipped_models_fit_the_size_budget():
    # `saved_models/` stays under 48 MiB (the models' distribution).
    total = shipped_bytes(ROOT)
    assert total < 48 * 2**20, f"{total / 2**20:.2f} MiB"


def test_the_budget_counts_what_git_ships_not_what_engines_write(tmp_path):
    import subprocess

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    models = tmp_path / "saved_models" / "m"
    models.mkdir(parents=True)
    (models / "model.tflite").write_bytes(b"x" * 10)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "m"], cwd=tmp_path, check=True)
    # `litert-lm run` leaves its cache beside the bundle.
    (models / "model.litertlm.xnnpack_cache").write_bytes(b"c" * 1000)
    assert shipped_bytes(str(tmp_path)) == 10
    (models / "new.tflite").write_bytes(b"n" * 5)  # tracked once added
    new = str(models / "new.tflite")
    subprocess.run(["git", "add", new], cwd=tmp_path, check=True)
    assert shipped_bytes(str(tmp_path)) == 15
