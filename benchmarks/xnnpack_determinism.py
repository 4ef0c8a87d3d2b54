"""Which LiteRT CPU settings give the same numbers every time, for each
kind of file the project ships?

For each shipped `.tflite` and each setting (the runtime's default,
`auto`, which chooses by the file's kind; LiteRT's builtin kernels;
XNNPACK with LiteRT's default flags; XNNPACK with `xnnpack_flags` set,
which replaces the defaults: 0x200 is XNNPACK's "slow consistent
arithmetic", 0x1 its signed int8 operators), fresh processes run the
same inputs through the runtime's reader (`LiteRTClassifier`: the
first 24 IMDB test reviews; `LiteRTTranslator`: 24 Tatoeba sentences
drawn with seed 0, ids and alignments), each twice, under
every combination of: TensorFlow imported first or not, 1 or 2 LiteRT
threads, 1 or 4 callers at once. Two processes run at a time (each the
other's load). A digest (SHA-256 of every output's bytes) a process;
`digests` is how many distinct ones a file and setting gave over the 8
processes: 1 means bit-identical everywhere. Then, in one process on
one thread, the settings alternate input by input (`benchmarks.
cpu_kernels`' inputs): each setting's median time a call, and its ratio
to XNNPACK with LiteRT's default flags (the goal: at most 1.1).

    python -m benchmarks.xnnpack_determinism

Writes `benchmarks/results/xnnpack_determinism.json`.
"""

import argparse
import concurrent.futures
import itertools
import json
import os
import subprocess
import sys

from benchmarks import results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = os.path.join(ROOT, "saved_models")
FILES = {
    "imdb_ssa (dynamic-range int8)": "imdb_ssa/model_dynamic_int8.tflite",
    "imdb_edge (full int8)": "imdb_edge/model_full_int8.tflite",
    "imdb_micro (full int8)": "imdb_micro/model_int8.tflite",
    "translator (dynamic-range int8)": "translation_en_fr/model.tflite",
}
SETTINGS = ("auto", "builtin", "xnnpack", "xnnpack:0x200", "xnnpack:0x201")


def inputs_file(folder, reviews=24, sentences=24):
    """A JSON file of the inputs every process reads: the first IMDB test
    reviews (real lengths) and Tatoeba sentences drawn with seed 0."""
    import random

    from benchmarks.litert_engines import reviews as test_reviews
    from benchmarks.litert_engines import sentences as all_sentences

    english = all_sentences(50_000)
    drawn = random.Random(0).sample(english, sentences)
    path = os.path.join(folder, "inputs.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"reviews": test_reviews(reviews), "sentences": drawn}, f)
    return path


def worker(path, setting, threads, tensorflow_first, callers, given):
    """One process's digest of the file's outputs under `setting`, on the
    inputs in the JSON file `given`."""
    if tensorflow_first:
        import tensorflow  # noqa: F401  (as a served process does)
    from ai_edge_litert import compiled_model

    kernels, _, flags = setting.partition(":")
    if flags:  # LiteRT's CpuOptions with the flags set (they replace)
        plain = compiled_model.CpuOptions

        def with_flags(**kwargs):
            return plain(**{**kwargs, "xnnpack_flags": int(flags, 16)})

        compiled_model.CpuOptions = with_flags
    from tests.runtime.cpu_digest import digest

    with open(given, encoding="utf-8") as f:
        inputs = json.load(f)[
            "sentences" if "translation" in path else "reviews"
        ]
    return digest(path, inputs, threads, callers, kernels)[0]


def timings(path, n=60):
    """`{setting: median ms a call}` on one thread, the settings
    alternating input by input in this process (`benchmarks.cpu_kernels`'
    inputs)."""
    import time

    import numpy as np
    from ai_edge_litert import compiled_model

    from benchmarks.litert_engines import feeds
    from keras_attn_runtime.artifact import load_verified
    from keras_attn_runtime.engine import LiteRTModel

    key, rows = feeds(path, n)
    data, model = load_verified(path)
    plain, runs = compiled_model.CpuOptions, {}
    for setting in SETTINGS:
        kernels, _, flags = setting.partition(":")
        if flags:
            compiled_model.CpuOptions = lambda f=int(flags, 16), **k: plain(
                **{**k, "xnnpack_flags": f}
            )
        try:
            litert = LiteRTModel(data, model, path, 1, cpu_kernels=kernels)
        finally:
            compiled_model.CpuOptions = plain
        runs[setting] = litert.runner(key)
    times = {s: [] for s in runs}
    for i, feed in enumerate(rows):
        order = SETTINGS[i % len(SETTINGS) :] + SETTINGS[: i % len(SETTINGS)]
        for setting in order:
            start = time.perf_counter()
            runs[setting](**feed)
            times[setting].append(time.perf_counter() - start)
    return {s: float(np.median(t)) * 1e3 for s, t in times.items()}


def launch(path, setting, threads, tensorflow_first, callers, given):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.xnnpack_determinism",
            "--worker",
            json.dumps(
                [path, setting, threads, tensorflow_first, callers, given]
            ),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    if done.returncode != 0:
        return "failed: " + done.stderr.strip().splitlines()[-1][:120]
    return done.stdout.strip().splitlines()[-1]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(worker(*json.loads(args.worker)))
        return 0
    import tempfile

    combos = list(itertools.product((1, 2), (False, True), (1, 4)))
    rows = []
    folder = tempfile.mkdtemp()
    given = inputs_file(folder)
    for name, relative in FILES.items():
        path = os.path.join(SHIPPED, relative)
        ms = timings(path)
        for setting in SETTINGS:
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                got = list(
                    pool.map(
                        lambda c, p=path, s=setting: launch(p, s, *c, given),
                        combos,
                    )
                )
            rows.append(
                {
                    "file": name,
                    "setting": setting,
                    "processes": len(got),
                    "digests": len(set(got)),
                    "failed": sum(g.startswith("failed") for g in got),
                    "median_ms": round(ms[setting], 3),
                    "vs_xnnpack_default": round(ms[setting] / ms["xnnpack"], 3),
                }
            )
            print(rows[-1], flush=True)
    path = os.path.join(results.RESULTS, "xnnpack_determinism.json")
    meta = results.meta(
        "xnnpack_determinism",
        argv,
        combinations="threads 1/2 x TensorFlow first or not x callers 1/4",
    )
    results.save(path, meta, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
