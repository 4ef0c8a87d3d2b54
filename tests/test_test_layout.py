"""The test suite's own layout: a test module imports helpers from helper
modules (`tests/tiny_models.py`, `tests/references.py`, ...), never from
another test module, whose import would run its module-level setup and
tie the two together."""

import ast
import os

from tests.paths import ROOT


def _imported_test_modules(path):
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            if name.split(".")[-1].startswith("test_"):
                yield node.lineno, name


def test_no_module_imports_a_test_module():
    found = []
    for folder in ("tests", "benchmarks", "tools", "recipes"):
        for root, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(root, name)
                    for line, module in _imported_test_modules(path):
                        where = os.path.relpath(path, ROOT)
                        found.append(f"{where}:{line} imports {module}")
    assert not found, "\n".join(found)
