"""What determinism costs: the runtime's CPU kernels on the shipped files,
the default (`cpu_kernels="auto"`: for the file's kind, the fastest
settings that give the same numbers every time) and LiteRT's builtin
kernels against XNNPACK with LiteRT's default flags
(`cpu_kernels="xnnpack"`), on one thread and two.

The same inputs as `benchmarks.litert_engines` (test reviews at their
own length, the first English sentences of `pairs.tsv`), the settings
alternating input by input in one process so that drift falls on all.
Rows: each file's median latency per call under each setting (and the
settings and engine `auto` chose: `CompiledModel`, or the Interpreter
for a dynamic-range file), its ratio to XNNPACK's default on one thread
(the goal for the default: at most 1.1), and whether its outputs
equalled the default's bit for bit (and the largest difference of a
float output, a translator's scores and alignments included).

    python -m benchmarks.cpu_kernels [--inputs 100]

Writes `benchmarks/results/cpu_kernels.json`.
"""

import argparse
import os
import sys
import time

import numpy as np

from benchmarks import results
from benchmarks.litert_engines import FILES, feeds
from tests.paths import ROOT

SETTINGS = (
    ("auto", 1),
    ("auto", 2),
    ("builtin", 1),
    ("xnnpack", 1),
    ("xnnpack", 2),
)
BASE = ("xnnpack", 1)


def runners(path, key):
    from keras_attn_runtime.artifact import load_verified
    from keras_attn_runtime.engine import LiteRTModel

    data, model = load_verified(path)
    out = {}
    for kernels, threads in SETTINGS:
        litert = LiteRTModel(
            data, model, path, num_threads=threads, cpu_kernels=kernels
        )
        used = litert.cpu_settings, litert.engine
        out[(kernels, threads)] = used, litert.runner(key)
    return out


def measure(path, n):
    key, rows = feeds(path, n)
    chosen = runners(path, key)
    runs = {setting: run for setting, (_, run) in chosen.items()}
    times = {s: [] for s in runs}
    equal = dict.fromkeys(runs, True)
    gap = dict.fromkeys(runs, 0.0)
    for i, feed in enumerate(rows):
        order = list(runs)[i % len(runs) :] + list(runs)[: i % len(runs)]
        outs = {}
        for setting in order:
            start = time.perf_counter()
            outs[setting] = runs[setting](**feed)
            times[setting].append(time.perf_counter() - start)
        want = outs[SETTINGS[0]]
        for setting, got in outs.items():
            equal[setting] &= all(np.array_equal(got[k], want[k]) for k in want)
            gap[setting] = max(
                [gap[setting]]
                + [
                    float(np.max(np.abs(got[k] - want[k])))
                    for k in want
                    if np.issubdtype(want[k].dtype, np.floating)
                    and want[k].size
                ]
            )
    base = float(np.median(times[BASE]))
    return [
        {
            "cpu_kernels": kernels,
            "settings": chosen[(kernels, threads)][0][0],
            "engine": chosen[(kernels, threads)][0][1],
            "threads": threads,
            "inputs": len(rows),
            "median_ms": round(
                float(np.median(times[(kernels, threads)])) * 1e3, 3
            ),
            "vs_xnnpack_default": round(
                float(np.median(times[(kernels, threads)])) / base, 3
            ),
            "equal_to_default": bool(equal[(kernels, threads)]),
            "max_abs_difference": float(f"{gap[(kernels, threads)]:.3g}"),
        }
        for kernels, threads in SETTINGS
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=100)
    args = parser.parse_args(argv)
    import ai_edge_litert

    rows = []
    for folder, name in FILES:
        path = os.path.join(ROOT, "saved_models", folder, name)
        for row in measure(path, args.inputs):
            row = {"file": f"{folder}/{name}", **row}
            print(row, flush=True)
            rows.append(row)
    out = results.save(
        os.path.join(results.RESULTS, "cpu_kernels.json"),
        results.meta(
            "cpu_kernels",
            sys.argv[1:] if argv is None else argv,
            ai_edge_litert=getattr(ai_edge_litert, "__version__", "2.3"),
        ),
        rows,
    )
    print("wrote", out)


if __name__ == "__main__":
    main()
