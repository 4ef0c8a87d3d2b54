"""The `keras-attn` argument parser, built from tables: the global
flags, `serve`'s settings and each command's arguments. Nothing heavy is
imported here, so `--help` and argument errors answer at once."""

import argparse
import sys

from keras_attn_cli.serve_flags import (  # noqa: F401  (the public tables)
    FILE_KINDS,
    LOG_LEVELS,
    POLL_FLAGS,
    SERVE_FLAGS,
    serve_arguments,
)

DESCRIPTION = """keras_attn: attention layers, their example models, export.

With no command, classifies sample reviews with the shipped IMDB model and
translates a few sentences; without models it says how to get them
(`keras-attn demo` trains a tiny model on a generated task). Models are
looked up in --models, else $KERAS_ATTN_MODELS, else
saved_models/ beside a source checkout, else the installed
keras-attn-models distribution; never in the working directory."""


# `keras-attn explain --method`'s choices (`keras_attn_runtime.
# attribution.METHODS`, less the random floor; a test keeps them equal).
EXPLAIN_METHODS = (
    "attention",
    "norm",
    "gradient_x_input",
    "integrated_gradients",
    "occlusion",
    "shapley",
    "greedy",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _flag(*names, **settings):
    """One `add_argument` call: the names, then its keyword arguments."""
    return names, settings


def _texts(texts_help):
    """Texts on the line or from --file."""
    return (
        _flag("text", nargs="*", help=texts_help),
        _flag(
            "--file",
            default=None,
            metavar="PATH",
            help="read texts from a file, one per line ('-' for stdin)",
        ),
    )


def _unsafe(verb):
    return _flag(
        "--allow-unsafe-ops",
        action="store_true",
        help=f"{verb} a SavedModel holding ops outside the allowlist",
    )


def _require_signature(verb):
    return _flag(
        "--require-signature",
        default=None,
        metavar="PEM",
        help=f"{verb} only a model signed (keras-attn sign) with this public "
        "key, or by a certificate this chain of PEM certificates issued; "
        "another is refused before it is read (default: not checked)",
    )


def _overwrite(what):
    return _flag("--overwrite", action="store_true", help=f"replace {what}")


# Options before the command (`--verbose` and `--sandbox` anywhere).
GLOBAL_FLAGS = (
    _flag(
        "--verbose",
        action="store_true",
        help="show TensorFlow's logs and full tracebacks",
    ),
    _flag(
        "--sandbox",
        action="store_true",
        help="run the command in a bubblewrap sandbox: no network, a "
        "read-only file system, an empty /tmp as scratch (for models from "
        "strangers; needs the bubblewrap package)",
    ),
    _flag(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop with an error if the command runs longer (a model from "
        "a stranger can loop forever)",
    ),
    _flag(
        "--accelerator",
        choices=("cpu", "gpu", "npu"),
        default="cpu",
        help="where LiteRT runs a .tflite (predict, explain, serve): the "
        "CPU (default), or a GPU or an NPU with the CPU running what it "
        "cannot; an error names a missing one",
    ),
    _flag(
        "--models",
        default=None,
        metavar="DIR",
        help="folder of shipped models (default: $KERAS_ATTN_MODELS, else "
        "the checkout's saved_models/, else the installed keras-attn-models;"
        " never ./saved_models)",
    ),
)

# Each command: (name, help, its arguments), in the order of `--help`.
COMMANDS = (
    (
        "classify",
        "classify reviews (the default)",
        (
            *_texts("reviews (default: samples)"),
            _flag("--model", default=None, help="a .keras text model"),
        ),
    ),
    (
        "demo",
        "train a tiny model on a generated task",
        (
            _flag(
                "--epochs",
                type=int,
                default=8,
                help="training epochs (default: 8)",
            ),
        ),
    ),
    (
        "explain",
        "which words a classifier used: maps side by side (HTML) and the "
        "attention (PNG) for one text",
        (
            _flag(
                "model",
                help="a text classifier: a shipped model's name, a .keras "
                "file, a .tflite, a SavedModel, or a folder holding one",
            ),
            _flag("text", nargs="?", default=None, help="the text (or --file)"),
            _flag(
                "--file",
                default=None,
                metavar="PATH",
                help="the text from a file",
            ),
            _flag(
                "--method",
                default=None,
                choices=EXPLAIN_METHODS,
                help="the map to explain with (default: greedy, the most "
                "faithful that every file runs; docs/explanations.md); "
                "the attention and, where the file allows, other maps are "
                "drawn beside it",
            ),
            _flag(
                "--out",
                default="explain_out",
                help="output folder (default: ./explain_out)",
            ),
            _overwrite(
                "attention.html/.png files that are not earlier keras-attn "
                "explain outputs"
            ),
        ),
    ),
    (
        "export",
        "SavedModel, LiteRT and ONNX export",
        (
            _flag("model", help="a .keras raw-text model or its folder"),
            _flag("--saved-model", default=None, help="target folder"),
            _flag("--tflite", default=None, help="target .tflite file"),
            _flag(
                "--onnx",
                default=None,
                help="target .onnx file (token ids in; vocabulary in its "
                "metadata)",
            ),
            _flag(
                "--quantize",
                default="none",
                choices=["none", "float16", "dynamic", "int8"],
                help="LiteRT weights: float32 (none), float16, dynamic-range "
                "int8 (int8 weights, float activations), or int8: "
                "full-integer int8 weights and activations, calibrated on "
                "--calibration texts (slow for recurrent models: they are "
                "unrolled step by step)",
            ),
            _flag(
                "--calibration",
                default=None,
                help="texts, one per line (int8)",
            ),
            _flag(
                "--dynamic-length",
                action="store_true",
                help="LiteRT input of variable length: each text runs at its "
                "own length (recurrent models get faster; with int8 only "
                "for models without a recurrent layer)",
            ),
            _flag(
                "--sign-private-key",
                default=None,
                metavar="PEM",
                help="sign each file written with this elliptic-curve key "
                "(keras-attn sign; default: not signed)",
            ),
            _flag(
                "--sign-certificate",
                default=None,
                metavar="PEM",
                help="the signing key's certificate (default: the key alone)",
            ),
            _flag(
                "--sign-certificate-chain",
                nargs="*",
                default=(),
                metavar="PEM",
                help="the certificates that issued --sign-certificate",
            ),
            _overwrite("destinations that are not earlier exports"),
        ),
    ),
    (
        "sign",
        "sign a model folder or file (OpenSSF model signing), for "
        "serve --require-signature",
        (
            _flag("model", help="a model folder or file"),
            _flag(
                "--private-key",
                required=True,
                metavar="PEM",
                help="the elliptic-curve private key to sign with",
            ),
            _flag(
                "--certificate",
                default=None,
                metavar="PEM",
                help="the key's certificate (default: sign with the key alone)",
            ),
            _flag(
                "--certificate-chain",
                nargs="*",
                default=(),
                metavar="PEM",
                help="the certificates that issued --certificate",
            ),
            _overwrite("the model's earlier signature"),
        ),
    ),
    (
        "verify",
        "check a model folder or file against its signature",
        (
            _flag("model", help="a model folder or file"),
            _flag(
                "--require-signature",
                required=True,
                metavar="PEM",
                help="the public key the model must be signed with, or the "
                "chain of certificates that issued its signer's",
            ),
        ),
    ),
    (
        "translate",
        "English to French (shipped model)",
        (
            *_texts(
                "English sentences, after the model's name or path if "
                "--model is not given (`translate translation_en_fr_lm "
                "'I am tired.'`)"
            ),
            _flag("--model", default=None, help="translator folder"),
            _flag(
                "--alignment",
                action="store_true",
                help="print the first alignment",
            ),
            _flag(
                "--stream",
                action="store_true",
                help="print the words as they are decoded, from a streaming "
                "LiteRT translator (--model: the file, or a folder holding "
                "streaming.tflite)",
            ),
            _unsafe("run"),
        ),
    ),
    (
        "align",
        "translation alignment heatmap (PNG)",
        (
            _flag("model", help="translator folder or its saved_model"),
            _flag("text"),
            _flag(
                "--out",
                default="alignment.png",
                help="PNG file to write (default: ./alignment.png)",
            ),
            _unsafe("run"),
        ),
    ),
    (
        "predict",
        "run a .keras, SavedModel folder, .tflite or .onnx",
        (
            _flag("artifact"),
            *_texts("texts to classify"),
            _flag(
                "--vocabulary",
                default=None,
                help="for a .tflite without an embedded vocabulary",
            ),
            _require_signature("run"),
            _unsafe("run"),
        ),
    ),
    (
        "serve",
        "serve models over TensorFlow Serving's REST API (KServe)",
        (
            *serve_arguments(_flag, _require_signature),
            _unsafe("serve"),
        ),
    ),
)


def build_parser():
    """The `keras-attn` parser, from `GLOBAL_FLAGS` and `COMMANDS`."""
    parser = _Parser(
        prog="keras-attn",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for names, settings in GLOBAL_FLAGS:
        parser.add_argument(*names, **settings)
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    for name, text, flags in COMMANDS:
        command = sub.add_parser(name, help=text)
        for names, settings in flags:
            command.add_argument(*names, **settings)
    return parser
