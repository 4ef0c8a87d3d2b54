"""LiteRT's two engines on the shipped files: `CompiledModel` (what
`keras_attn_runtime` runs) against the classic `Interpreter`.

One thread each; the same inputs (the first test reviews, tokenized as
the runtime does, each at its own length for a variable-length file; the
English sentences of the first pairs of `pairs.tsv` for the
translator), the engines alternating
input by input so that drift falls on both. Rows: each file's median
latency per call under each engine and their ratio (CompiledModel over
Interpreter; below 1: CompiledModel is faster), and whether the outputs
were equal.

    python -m benchmarks.litert_engines [--inputs 200]

Writes `benchmarks/results/litert_engines.json`.
"""

import argparse
import itertools
import os
import sys
import time

import numpy as np

from benchmarks import results
from tests.paths import ROOT

FILES = (
    ("imdb_ssa", "model_dynamic_int8.tflite"),
    ("imdb_edge", "model_full_int8.tflite"),
    ("imdb_micro", "model_int8.tflite"),
    ("translation_en_fr", "model.tflite"),
)


def reviews(n):
    import tensorflow_datasets as tfds

    data = tfds.load("imdb_reviews", split=f"test[:{n}]", as_supervised=True)
    return [t.decode("utf-8") for t, _ in tfds.as_numpy(data)]


def sentences(n):
    path = os.path.join(
        ROOT, "..", "shared", "data", "translation", "pairs.tsv"
    )
    with open(path, encoding="utf-8") as f:
        return [line.split("\t")[0] for line in itertools.islice(f, n)]


def feeds(path, n):
    """`(signature key, [input dicts])` for the file at `path`."""
    from keras_attn_runtime import LiteRTClassifier, LiteRTTranslator

    if "translation" in path:
        lite = LiteRTTranslator(path)
        rows = []
        for text in sentences(n):
            words = lite.source_words(text, truncate=True)
            if words:
                rows.append({"source": lite.source_ids(words)})
        return "translate", rows
    clf = LiteRTClassifier(path)
    return "serving_default", [
        {clf.input_name: row[None]} for row in clf.tokenizer(reviews(n))
    ]


def engines(path, key):
    """`{engine: run(inputs) -> outputs}`, one thread each."""
    from ai_edge_litert.interpreter import Interpreter

    from keras_attn_runtime.artifact import load_verified
    from keras_attn_runtime.engine import LiteRTModel

    data, model = load_verified(path)
    compiled = LiteRTModel(data, model, path, num_threads=1, interpreter=False)
    assert compiled.engine == "compiled_model", compiled.interpreter_reason
    runner = compiled.runner(key)
    classic = Interpreter(model_path=path, num_threads=1)
    signature = classic.get_signature_runner(key)
    return {
        "CompiledModel": runner,
        "Interpreter": lambda **feed: signature(**feed),
    }


def measure(path, n):
    key, rows = feeds(path, n)
    runs = engines(path, key)
    times = {name: [] for name in runs}
    equal = True
    for i, feed in enumerate(rows):
        order = list(runs) if i % 2 == 0 else list(runs)[::-1]
        outs = {}
        for name in order:
            start = time.perf_counter()
            outs[name] = runs[name](**feed)
            times[name].append(time.perf_counter() - start)
        a, b = outs["CompiledModel"], outs["Interpreter"]
        equal &= all(
            np.array_equal(a[k], b[k])
            if np.issubdtype(np.asarray(b[k]).dtype, np.integer)
            else np.allclose(a[k], b[k], rtol=0, atol=1e-6)
            for k in b
        )
    compiled = float(np.median(times["CompiledModel"])) * 1e3
    classic = float(np.median(times["Interpreter"])) * 1e3
    return {
        "inputs": len(rows),
        "compiled_model_ms": round(compiled, 3),
        "interpreter_ms": round(classic, 3),
        "time_ratio": round(compiled / classic, 3),
        "outputs_equal": bool(equal),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=200)
    args = parser.parse_args(argv)
    import ai_edge_litert

    rows = []
    for folder, name in FILES:
        path = os.path.join(ROOT, "saved_models", folder, name)
        row = {"file": f"{folder}/{name}", **measure(path, args.inputs)}
        print(row, flush=True)
        rows.append(row)
    out = results.save(
        os.path.join(results.RESULTS, "litert_engines.json"),
        results.meta(
            "litert_engines",
            sys.argv[1:] if argv is None else argv,
            ai_edge_litert=getattr(ai_edge_litert, "__version__", "2.3"),
            threads=1,
        ),
        rows,
    )
    print("wrote", out)


if __name__ == "__main__":
    main()
