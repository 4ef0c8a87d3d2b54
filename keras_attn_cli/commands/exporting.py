"""`keras-attn export`: a raw-text `.keras` model as a SavedModel, a
LiteRT file and an ONNX file, all or nothing."""

import os
import sys

from keras_attn_cli.finding import (
    resolve_model,
)
from keras_attn_cli.inputs import (
    read_text_file,
)
from keras_attn_cli.loading import (
    load_classifier,
)


def export(args):
    from keras_attn import export as exporters

    if not (args.saved_model or args.tflite or args.onnx):
        raise ValueError(
            "Nothing to export: give --saved-model, --tflite and/or --onnx."
        )
    texts = None
    if args.calibration is not None:
        texts = read_text_file(args.calibration, "--calibration")
    names = {
        "quantize": "--quantize",
        "calibration_texts": "--calibration",
        "dynamic_length": "--dynamic-length",
        "saved_model": "--saved-model",
        "tflite": "--tflite",
        "onnx": "--onnx",
        "signing": {
            "private_key": "--sign-private-key",
            "certificate": "--sign-certificate",
            "certificate_chain": "--sign-certificate-chain",
        },
    }
    model_file = resolve_model(args.model, "model", "keras", args)
    if os.path.isdir(model_file):
        model_file = os.path.join(model_file, "model.keras")
    settings = dict(
        saved_model=args.saved_model,
        tflite=args.tflite,
        onnx=args.onnx,
        quantize=args.quantize,
        calibration_texts=texts,
        dynamic_length=args.dynamic_length,
        overwrite=args.overwrite,
        protect=[model_file],
        names=names,
    )
    signing = None
    if args.sign_private_key is not None:
        signing = {
            "private_key": args.sign_private_key,
            "certificate": args.sign_certificate,
            "certificate_chain": args.sign_certificate_chain,
        }
    elif args.sign_certificate or args.sign_certificate_chain:
        raise ValueError(
            "Expected --sign-private-key with --sign-certificate. Received: "
            f"--sign-certificate={args.sign_certificate!r}"
        )
    # Check destinations and settings before the (slow) model load.
    exporters.check_text_export(**settings, signing=signing)
    model = load_classifier(model_file)
    # A progress bar where a person waits (the int8 calibration: a minute
    # for the shipped BiLSTM), none when the output goes to a file or pipe.
    written = exporters.export_text_model(
        model, **settings, verbose=sys.stdout.isatty(), signing=signing
    )
    if "saved_model" in written:
        print(f"wrote SavedModel {args.saved_model}")
    if "tflite" in written:
        size = os.path.getsize(args.tflite) / 2**20
        kind = {
            "none": "float32",
            "float16": "float16 weights",
            "dynamic": "dynamic-range: int8 weights, float activations",
            "int8": "full-integer int8 weights and activations",
        }[args.quantize]
        print(f"wrote LiteRT {args.tflite} ({kind}, {size:.2f} MiB)")
    if "onnx" in written:
        size = os.path.getsize(args.onnx) / 2**20
        print(f"wrote ONNX {args.onnx} (float32, token ids in, {size:.2f} MiB)")
    if signing is not None:
        print(f"signed each with {args.sign_private_key}")
    return 0
