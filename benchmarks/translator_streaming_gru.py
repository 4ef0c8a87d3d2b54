"""The shipped GRU translator as a streaming LiteRT file against the
shipped one-call beam file: agreement with the SavedModel, latency one
sentence at a time on one thread, time to the first words, size.

    python -m benchmarks.translator_streaming_gru --sentences 200 --timing 50

For each way of writing its int8 weights (`recipes/translation_streaming.py`
`--weights`): `litert_int8` (LiteRT's dynamic-range int8 of the
dequantized weights, as the one-call file's) and `keras_int8` (Keras's
int8 layers, dequantized inside each step). Validation sentences of the
recipe's split only.
"""

import argparse
import os
import sys
import tempfile

from benchmarks import results
from tests.paths import ROOT

sys.path.insert(0, os.path.join(ROOT, "recipes"))

WEIGHTS = ("litert_int8", "keras_int8")


def row(report):
    n = report["sentences"]
    return {
        "weights": report["weights"],
        "sentences": n,
        "beam equal to SavedModel": report["streaming_equals_saved_model"],
        "one-call file equal to SavedModel": report[
            "one_call_file_equals_saved_model"
        ],
        "greedy equal to SavedModel greedy": report[
            "streaming_greedy_equals_saved_model_greedy"
        ],
        "parts join to translation": report["stream_parts_join_to_translation"],
        "one-call beam ms": round(1000 * report["one_call_file_s"], 2),
        "streaming beam ms": round(1000 * report["streaming_file_s"], 2),
        "beam first words ms": round(
            1000 * report["streaming_first_words_s"], 2
        ),
        "greedy first word ms": round(
            1000 * report["streaming_greedy_first_word_s"], 2
        ),
        "one-call file MB": round(report["one_call_file_mb"], 2),
        "streaming file MB": round(report["streaming_file_mb"], 2),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--timing", type=int, default=50)
    parser.add_argument("--weights", nargs="+", default=list(WEIGHTS))
    args = parser.parse_args(argv)
    import translation_streaming

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for weights in args.weights:
            report = translation_streaming.main(
                os.path.join(folder, f"{weights}.tflite"),
                sentences=args.sentences,
                timing=args.timing,
                weights=weights,
            )
            rows.append(row(report))
    meta = results.meta(
        "translator_streaming_gru",
        sys.argv[1:] if argv is None else argv,
        threads=1,
    )
    results.save(
        os.path.join(results.RESULTS, "translator_streaming_gru.json"),
        meta,
        rows,
    )


if __name__ == "__main__":
    main()
