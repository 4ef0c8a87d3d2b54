"""Export a shipped IMDB model to LiteRT and measure every quantization.

For `saved_models/<name>/model.keras` this writes `model_float32.tflite` and
`model_dynamic_int8.tflite` beside it (each carries its vocabulary inside; a
`vocabulary.txt` is kept beside them for other tools), and records in
`<name>/litert.json`, for float32, float16, dynamic-range int8 and
full-integer int8: the size, the max |LiteRT − Keras| difference on 1,000
test reviews, and the accuracy on the full test split (LiteRT only, with
the pure-Python tokenizer).

    python recipes/imdb_export.py saved_models/imdb_ssa [--ship-int8 dynamic]
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    import imdb_classification as ex
    import keras

    from keras_attn import export
    from keras_attn_runtime import LiteRTClassifier

    p = argparse.ArgumentParser()
    p.add_argument("folder")
    p.add_argument(
        "--ship-int8",
        choices=["dynamic", "int8"],
        default="int8",
        help="which int8 variant ships: model_dynamic_int8.tflite (int8 "
        "weights, float activations) or model_full_int8.tflite",
    )
    p.add_argument("--parity-reviews", type=int, default=1000)
    p.add_argument("--calibration", type=int, default=500)
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        help="evaluate on this many test reviews (default all)",
    )
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument(
        "--variants",
        nargs="+",
        default=["none", "float16", "dynamic", "int8"],
        help="quantizations to run (results merge into litert.json)",
    )
    p.add_argument(
        "--subset",
        type=int,
        default=None,
        help="evaluate the variants not shipped on this many "
        "test reviews only (to save time)",
    )
    p.add_argument(
        "--dynamic-length",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="LiteRT files with a variable time axis (each review runs at "
        "its own length); full-integer int8 stays static (unrolled)",
    )
    args = p.parse_args(argv)

    model = keras.models.load_model(os.path.join(args.folder, "model.keras"))
    data = ex.load_imdb(None, 0.1, args.seed)
    test_x, test_y = data["test"]
    if args.limit:
        test_x, test_y = test_x[: args.limit], test_y[: args.limit]
    texts = [t.decode("utf-8") for t in test_x]
    calib = [t.decode("utf-8") for t in data["train"][0][: args.calibration]]
    keras_out = model.predict(
        np.asarray(texts[: args.parity_reviews], dtype=object), verbose=0
    )
    report_path = os.path.join(args.folder, "litert.json")
    report = {}
    if os.path.isfile(report_path):
        with open(report_path) as f:
            report = {k: v for k, v in json.load(f).items() if k != "command"}
    with tempfile.TemporaryDirectory() as tmp:
        for quantize in args.variants:
            path = os.path.join(tmp, f"model_{quantize}.tflite")
            start = time.time()
            export.export_text_tflite(
                model,
                path,
                quantize=quantize,
                calibration_texts=calib,
                dynamic_length=args.dynamic_length and quantize != "int8",
                verbose=sys.stdout.isatty(),  # a progress bar on a terminal
            )
            convert_s = time.time() - start
            clf = LiteRTClassifier(path)
            start = time.time()
            shipped = quantize in ("none", args.ship_int8)
            n_eval = len(texts) if shipped or not args.subset else args.subset
            out = clf.predict(texts[:n_eval])
            eval_s = time.time() - start
            probs = out["probability"][:, 0]
            n = args.parity_reviews
            attention = out["attention"][:n]
            width = keras_out["attention"].shape[-1]
            # A variable-length model returns as many columns as the
            # longest review; the static model's extra ones are padding (0).
            attention = np.pad(
                attention,
                [(0, 0), (0, 0), (0, width - attention.shape[-1])],
            )
            report[quantize] = {
                "size_bytes": os.path.getsize(path),
                "ops": export.tflite_op_names(path),
                "max_abs_diff_probability": float(
                    np.abs(probs[:n] - keras_out["probability"][:n, 0]).max()
                ),
                "max_abs_diff_attention": float(
                    np.abs(attention - keras_out["attention"][:n]).max()
                ),
                "test_accuracy": float(
                    np.mean((probs > 0.5) == (test_y[:n_eval] > 0.5))
                ),
                "test_reviews": n_eval,
                "convert_s": round(convert_s, 1),
                "eval_s_per_review": eval_s / n_eval,
            }
            print(
                quantize,
                json.dumps(
                    {k: v for k, v in report[quantize].items() if k != "ops"}
                ),
                flush=True,
            )
            if quantize == "none":
                ship = "model_float32.tflite"
            elif quantize == args.ship_int8:
                kind = "dynamic" if quantize == "dynamic" else "full"
                ship = f"model_{kind}_int8.tflite"
            else:
                continue
            os.replace(path, os.path.join(args.folder, ship))
            report[quantize]["shipped_as"] = ship
    if "none" in report:
        f32 = report["none"]["size_bytes"]
        for q in report.values():
            q["size_vs_float32"] = q["size_bytes"] / f32
    export.write_vocabulary(
        export.split_text_model(model)[0],
        os.path.join(args.folder, "vocabulary.txt"),
    )
    with open(report_path, "w") as f:
        json.dump(
            {
                "command": "python recipes/imdb_export.py "
                + " ".join(argv or sys.argv[1:]),
                **report,
            },
            f,
            indent=2,
        )
    return report


if __name__ == "__main__":
    main()
