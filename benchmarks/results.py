"""What the benchmark scripts write: one JSON file per comparison under
`benchmarks/results/`, `{"meta": {...}, "rows": [{...}, ...]}`.

`meta` says how the figures were made (the command, the date, the machine,
the versions of what was imported); `python -m benchmarks.report` turns
each file into BENCHMARKS.md's table, so the tables are never typed by
hand.
"""

import json
import os
import platform
import shlex
import sys
import time

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
LIBRARIES = ("tensorflow", "keras", "jax", "torch", "numpy")


def meta(script, argv, **extra):
    """The record of one run of `python -m benchmarks.<script> <argv>`."""
    versions = {
        name: sys.modules[name].__version__
        for name in LIBRARIES
        if getattr(sys.modules.get(name), "__version__", None)
    }
    return {
        "command": f"python -m benchmarks.{script} {shlex.join(argv)}".strip(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "python": platform.python_version(),
        **versions,
        **extra,
    }


def save(path, meta, rows, **more):
    """Write `{"meta", "rows", **more}` to `path` (folders created)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "rows": rows, **more}, f, indent=2)
        f.write("\n")
    return path
