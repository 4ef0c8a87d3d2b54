"""Python run in a child process with the checkout importable, for the
tests that must see a fresh interpreter: a script (`run_python`), and a
LiteRT file under `CompiledModel` beside the Interpreter
(`run_compiled`)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

from tests.paths import ROOT


def run_python(script, timeout=300):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": ROOT},
    )


# LiteRT's documented use (`compiled_call` of the drift reproduction in
# tools/, LiteRT and NumPy only): CompiledModel's own buffers, each
# output read at the shape CompiledModel declares; then the Interpreter
# on the same inputs. Prints the largest difference of each output.
CHILD = textwrap.dedent(
    """
    import importlib.util, json, sys
    import numpy as np
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.interpreter import Interpreter

    tool, path, key = sys.argv[1:4]
    spec = importlib.util.spec_from_file_location("xnnpack_drift", tool)
    drift = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(drift)
    feeds = [
        {n: np.array(v, dtype=d) for n, (v, d) in feed.items()}
        for feed in json.loads(sys.argv[4])
    ]
    model = CompiledModel.from_file(path)
    interpreter = Interpreter(model_path=path).get_signature_runner(key)
    report = []
    for feed in feeds:
        got = drift.compiled_call(model, key, feed)
        want = interpreter(**feed)
        row = {}
        for name, value in got.items():
            row[name] = {
                "declared": list(value.shape),
                "interpreter": list(want[name].shape),
                "max_abs_diff": float(
                    np.max(np.abs(value.astype("float64") - want[name]))
                ) if value.shape == want[name].shape else None,
            }
        report.append(row)
    print(json.dumps(report))
    """
)
TOOL = os.path.join(ROOT, "tools", "xnnpack_drift.py")


def run_compiled(path, key, feeds, integer_outputs=()):
    """Run `feeds` (a list of `{input name: array}`) through signature
    `key` of `path` under `CompiledModel` in a child process; assert that
    it ran, that every declared shape is the Interpreter's, and that the
    outputs are equal (integers exactly, floats within 1e-6)."""
    payload = json.dumps(
        [
            {
                n: [np.asarray(a).tolist(), str(np.asarray(a).dtype)]
                for n, a in feed.items()
            }
            for feed in feeds
        ]
    )
    done = subprocess.run(
        [sys.executable, "-c", CHILD, TOOL, path, key, payload],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert done.returncode == 0, (
        f"CompiledModel on {os.path.basename(path)} ended with "
        f"{done.returncode}: {done.stderr[-2000:]}"
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    for row in report:
        for name, seen in row.items():
            assert seen["declared"] == seen["interpreter"], (name, seen)
            bound = 0.0 if name in integer_outputs else 1e-6
            assert seen["max_abs_diff"] <= bound, (name, seen)
    return report
