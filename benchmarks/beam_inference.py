"""Apache Beam's RunInference with keras_attn's handlers on this machine:
texts a second on DirectRunner with 1 and 2 worker processes, beside
the model called directly in this process and the command line
(`keras-attn predict --file`, `keras-attn translate --file`, start-up
included), and the memory a worker holds.

For each handler (`keras_attn_runtime.beam`'s LiteRT ones,
`keras_attn.beam`'s SavedModel ones) on its shipped model: `--reviews`
IMDB test reviews for a classifier, `--sentences` held-out English
sentences for a translator (the same texts in every row of a handler).
`workers` 1 is DirectRunner in this process; 2 is two processes
(`multi_processing`), whose peak resident memory is sampled from
`/proc` (`worker_rss_mib`: the largest). The translator's SavedModel
also runs with `bucket_by_length` (Beam's length buckets).

    python -m benchmarks.beam_inference [--reviews 2000] [--sentences 300]

Writes `benchmarks/results/beam_inference.json`.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

from benchmarks import results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = os.path.join(ROOT, "saved_models")
# The recipe's pipeline (`recipes/beam_inference.py`), importable here and
# in the worker processes DirectRunner starts (they unpickle its steps).
RECIPES = os.path.join(ROOT, "recipes")
sys.path.insert(0, RECIPES)
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (RECIPES, ROOT, os.environ.get("PYTHONPATH")) if p
)


def handlers():
    """`[(row name, task, handler, CLI arguments)]`."""
    from keras_attn.beam import (
        SavedModelClassifierHandler,
        SavedModelTranslatorHandler,
    )
    from keras_attn_runtime.beam import (
        LiteRTClassifierHandler,
        LiteRTTranslatorHandler,
    )

    edge = os.path.join(SHIPPED, "imdb_edge", "model_full_int8.tflite")
    ssa = os.path.join(SHIPPED, "imdb_ssa")
    lite = os.path.join(SHIPPED, "translation_en_fr", "model.tflite")
    translator = os.path.join(SHIPPED, "translation_en_fr")
    return [
        (
            "LiteRT classifier",
            "classify",
            LiteRTClassifierHandler(edge),
            ["predict", edge],
        ),
        (
            "SavedModel classifier",
            "classify",
            SavedModelClassifierHandler(ssa),
            ["predict", ssa],
        ),
        (
            "LiteRT translator",
            "translate",
            LiteRTTranslatorHandler(lite),
            ["translate", "--model", lite],
        ),
        (
            "SavedModel translator",
            "translate",
            SavedModelTranslatorHandler(translator),
            ["translate", "--model", translator],
        ),
        (
            "SavedModel translator, length buckets",
            "translate",
            SavedModelTranslatorHandler(translator, bucket_by_length=True),
            None,
        ),
    ]


class PeakChildRSS:
    """The largest resident memory of this process's descendants, sampled
    every 0.2 s while it runs (MiB)."""

    def __init__(self):
        self.peak, self.stop = 0.0, threading.Event()

    def __enter__(self):
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def _watch(self):
        me = os.getpid()
        while not self.stop.wait(0.2):
            for pid in _descendants(me):
                try:
                    with open(f"/proc/{pid}/status", encoding="ascii") as f:
                        for line in f:
                            if line.startswith("VmRSS:"):
                                rss = int(line.split()[1]) / 1024
                                self.peak = max(self.peak, rss)
                except OSError:
                    continue


def _descendants(root):
    children = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(pid))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def beam_run(texts, handler, workers):
    from beam_inference import read_answers, run_pipeline

    options = ["--direct_num_workers", str(workers)]
    if workers > 1:
        options += ["--direct_running_mode", "multi_processing"]
    with tempfile.TemporaryDirectory() as folder:
        output = os.path.join(folder, "answers")
        with PeakChildRSS() as memory:
            start = time.perf_counter()
            run_pipeline(texts, handler, output, options)
            seconds = time.perf_counter() - start
        answers = read_answers(output)
    return seconds, answers, memory.peak


def direct_run(texts, handler):
    model = handler.load_model()
    start = time.perf_counter()
    answers = {t: handler.predict(model, [t])[0] for t in texts}
    return time.perf_counter() - start, answers


def cli_run(texts, arguments):
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write("\n".join(texts) + "\n")
        f.flush()
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "keras_attn_cli",
                *arguments,
                "--file",
                f.name,
            ],
            check=True,
            capture_output=True,
            cwd=ROOT,
        )
        return time.perf_counter() - start


def same(a, b):
    if isinstance(a, str):
        return a == b
    return abs(a - b) <= 1e-6


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reviews", type=int, default=2000)
    parser.add_argument("--sentences", type=int, default=300)
    args = parser.parse_args(argv)
    from beam_inference import held_out_sentences, imdb_test_reviews

    corpus = {
        "classify": imdb_test_reviews()[: args.reviews],
        "translate": held_out_sentences()[: args.sentences],
    }
    rows = []
    for name, task, handler, cli in handlers():
        texts = corpus[task]
        seconds, want = direct_run(texts, handler)
        row = {
            "handler": name,
            "texts": len(texts),
            "direct_texts_per_s": len(texts) / seconds,
        }
        for workers in (1, 2):
            seconds, got, rss = beam_run(texts, handler, workers)
            agree = sum(same(got[t], want[t]) for t in texts)
            row[f"beam_{workers}_texts_per_s"] = len(texts) / seconds
            row[f"beam_{workers}_same_as_direct"] = f"{agree}/{len(texts)}"
            if workers > 1 and rss:  # left out: no worker process seen
                row["worker_rss_mib"] = rss
        if cli is not None:
            row["cli_texts_per_s"] = len(texts) / cli_run(texts, cli)
        print(row, flush=True)
        rows.append(row)
    path = os.path.join(results.RESULTS, "beam_inference.json")
    results.save(path, results.meta("beam_inference", argv), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
