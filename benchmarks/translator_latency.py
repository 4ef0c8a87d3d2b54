"""Per-sentence latency of LiteRT translators: beam search against greedy
search inside the file, one call per sentence, interleaved sentence by
sentence, on one thread (and LiteRT's default threads).

    python -m benchmarks.translator_latency BEAM.tflite GREEDY.tflite \
        --sentences FILE [--limit 500] [--names beam greedy] [--out R.json]

`--sentences`: one English sentence per line (for example the held-out
English side of the translation split). Prints medians and means and,
with `--out`, writes them as JSON with the command, date, machine and
versions. Each file is warmed up on the first sentence first. `--names`
labels the two files (two exports of one search, say, before and after a
change).
"""

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import time


def measure(paths, sentences, threads):
    from keras_attn_runtime import LiteRTTranslator

    translators = {
        name: LiteRTTranslator(path, num_threads=threads)
        for name, path in paths.items()
    }
    for translator in translators.values():
        translator.translate(sentences[0])
    times = {name: [] for name in paths}
    for sentence in sentences:  # interleaved: the same load on both
        for name, translator in translators.items():
            start = time.perf_counter()
            translator.translate(sentence)
            times[name].append(1000 * (time.perf_counter() - start))
    return {
        name: {
            "median_ms": round(statistics.median(t), 2),
            "mean_ms": round(statistics.fmean(t), 2),
            "p90_ms": round(sorted(t)[int(0.9 * (len(t) - 1))], 2),
        }
        for name, t in times.items()
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("beam", help="a LiteRT translator with beam search")
    p.add_argument("greedy", help="the same model with greedy search")
    p.add_argument("--sentences", required=True, help="one per line")
    p.add_argument("--limit", type=int, default=500)
    p.add_argument("--out", help="write the figures as JSON here")
    p.add_argument(
        "--names",
        nargs=2,
        default=("beam", "greedy"),
        metavar=("FIRST", "SECOND"),
        help="labels of the two files (default: beam greedy)",
    )
    args = p.parse_args(argv)
    with open(args.sentences, encoding="utf-8") as f:
        sentences = [line.strip() for line in f if line.strip()]
    sentences = sentences[: args.limit]
    if not sentences:
        p.error(f"--sentences: no sentence in {args.sentences!r}")
    if args.names[0] == args.names[1]:
        p.error(f"--names: two different labels, not {args.names!r}")
    paths = dict(zip(args.names, (args.beam, args.greedy), strict=True))
    import ai_edge_litert
    import numpy

    result = {
        "command": "python -m benchmarks.translator_latency "
        + shlex.join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "versions": {
            "python": platform.python_version(),
            "numpy": numpy.__version__,
            "ai_edge_litert": getattr(ai_edge_litert, "__version__", "?"),
        },
        "sentences": len(sentences),
        "one_thread": measure(paths, sentences, 1),
        "default_threads": measure(paths, sentences, None),
    }
    for threads in ("one_thread", "default_threads"):
        for name, row in result[threads].items():
            print(f"{threads:16} {name:8} median {row['median_ms']:7.2f} ms")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
