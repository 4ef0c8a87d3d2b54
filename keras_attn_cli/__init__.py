"""The `keras-attn` command line: argument parsing only.

This package imports nothing heavy, so `keras-attn --help` and argument
errors answer at once; TensorFlow and Keras are imported (quietly, unless
`--verbose`) only once a command runs, from `keras_attn_cli.commands`.
"""

import argparse
import contextlib
import os
import sys
import traceback

DESCRIPTION = """keras_attn: attention layers, their example models, export.

With no command, classifies sample reviews with the shipped IMDB model and
translates a few sentences; without models it says how to get them
(`keras-attn demo` trains a tiny model on a generated task). Models are
looked up in --models, else $KERAS_ATTN_MODELS, else
saved_models/ beside a source checkout, else the installed
keras-attn-models distribution; never in the working directory."""


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

# `keras-attn serve --log-level`'s choices (`keras_attn_cli.serve`'s
# LOG_LEVELS; a test ties them).
LOG_LEVELS = ("debug", "info", "warning", "error")

# `keras-attn serve`'s settings: (flag, type, default, help). The
# defaults are `keras_attn_cli.serve`'s LIMITS and BATCHING.
SERVE_FLAGS = (
    ("--host", str, "127.0.0.1", "address to listen on (0.0.0.0: all)"),
    ("--port", int, 8501, "HTTP port (TensorFlow Serving's REST port)"),
    (
        "--grpc-port",
        int,
        8500,
        "gRPC port: TensorFlow Serving's and KServe v2's gRPC APIs (0: off)",
    ),
    ("--max-body-bytes", int, 1 << 20, "largest request body"),
    ("--max-instances", int, 256, "most examples in one request"),
    ("--max-text-bytes", int, 100_000, "longest text input (UTF-8 bytes)"),
    ("--max-batch-size", int, 32, "most examples merged into one call"),
    ("--batch-wait-ms", float, 5.0, "longest wait for a batch to fill"),
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
        "attention HTML + PNG for one text",
        (
            _flag(
                "model",
                help="a .keras text model or its folder, or a .tflite with "
                "an attention output (the shipped imdb_edge file)",
            ),
            _flag("text", nargs="?", default=None, help="the text (or --file)"),
            _flag(
                "--file",
                default=None,
                metavar="PATH",
                help="the text from a file",
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
            _overwrite("destinations that are not earlier exports"),
        ),
    ),
    (
        "translate",
        "English to French (shipped model)",
        (
            *_texts("English sentences"),
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
            _unsafe("run"),
        ),
    ),
    (
        "serve",
        "serve models over TensorFlow Serving's REST API (KServe)",
        (
            _flag(
                "model",
                nargs="*",
                help="a shipped model's name, a folder, a SavedModel, a "
                ".keras or a .tflite (default: every shipped model, under "
                "its folder name)",
            ),
            *(
                _flag(
                    flag,
                    type=kind,
                    default=default,
                    help=f"{text} (default: {default})",
                )
                for flag, kind, default, text in SERVE_FLAGS
            ),
            _flag(
                "--model-versions",
                default="latest",
                help="of a folder of numbered versions (MODEL/1/, MODEL/2/): "
                "latest, all or N,M (default: latest)",
            ),
            _flag(
                "--auth-token-file",
                default=None,
                help="a file holding a bearer token that every route but "
                "the health routes then needs (default: none)",
            ),
            _flag(
                "--enable-model-management",
                action="store_true",
                help="turn on KServe's /v2/repository load and unload "
                "routes (default: off)",
            ),
            _flag(
                "--model-name",
                default=None,
                metavar="NAME",
                help="the name clients use for the one model served "
                "(default: its folder's or file's name)",
            ),
            _flag(
                "--log-level",
                default="info",
                choices=LOG_LEVELS,
                help="the server's log: info logs each request, warning "
                "each client error in one line (default: info)",
            ),
            _flag(
                "--enable-docs",
                action="store_true",
                help="turn on the OpenAPI pages, /openapi.json and /docs "
                "(default: off)",
            ),
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


@contextlib.contextmanager
def _quiet_native_stderr():
    """Send file descriptor 2 (where TensorFlow's and LiteRT's C++ logs
    go, bypassing Python) to /dev/null; Python's `sys.stderr` keeps
    writing to the real standard error."""
    sys.stderr.flush()
    try:
        python_on_fd2 = sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):
        python_on_fd2 = False  # captured (e.g. by pytest): leave it be
    saved = os.dup(2)
    old = sys.stderr
    real = None
    _REAL_STDERR[0] = saved  # where the --timeout watchdog writes
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        if python_on_fd2:
            real = os.fdopen(saved, "w", buffering=1, encoding="utf-8")
            sys.stderr = real
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        _REAL_STDERR[0] = 2
        sys.stderr = old
        if real is not None:
            real.close()
        else:
            os.close(saved)


def _watchdog(seconds):
    """After `seconds`, print a clean error and end the process: a graph
    stuck in a TensorFlow op cannot be interrupted from Python."""
    import threading

    def expire():
        message = (
            f"keras-attn: error: the command ran longer than --timeout="
            f"{seconds:g} seconds (a model that never finishes?)\n"
        )
        os.write(_REAL_STDERR[0], message.encode())
        os._exit(2)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    return timer


_REAL_STDERR = [2]
_SILENCED_AT_EXIT = []


# Flags taken anywhere on the line, before or after the command.
_ANYWHERE = ("--verbose", "--sandbox")
# The extra that installs a module a command may need.
_EXTRAS = {
    "ai_edge_litert": "export",
    "onnx": "export",
    "onnxruntime": "export",
    "tf2onnx": "export",
    "matplotlib": "examples",
    "tensorflow": "cpu",
    "kserve": "serve",
}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    given = {flag for flag in _ANYWHERE if flag in argv}
    rest = [a for a in argv if a not in _ANYWHERE]
    args = build_parser().parse_args([*sorted(given), *rest])
    if args.command is None:
        args = build_parser().parse_args([*sorted(given), *rest, "classify"])
    if args.timeout is not None and args.timeout <= 0:
        build_parser().error(
            f"--timeout must be positive. Received: --timeout={args.timeout}"
        )
    if args.sandbox and not os.environ.get("KERAS_ATTN_SANDBOX"):
        from keras_attn_cli import sandbox

        return sandbox.run(argv)
    timer = _watchdog(args.timeout) if args.timeout else None
    try:
        return _main(args)
    finally:
        if timer is not None:
            timer.cancel()


def _main(args):
    if args.verbose:
        return _run(args)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    import warnings

    with warnings.catch_warnings(), _quiet_native_stderr():
        warnings.simplefilter("ignore")
        code = _run(args)
    if "ai_edge_litert" in sys.modules:
        _quiet_at_exit()
    return code


def _quiet_at_exit():
    """LiteRT logs its accelerators' teardown from C++ destructors that
    run after Python has finished: file descriptor 2 goes to /dev/null
    once Python's last words are flushed (after `--verbose`'s absence
    said to be quiet)."""
    import atexit

    if _SILENCED_AT_EXIT:
        return
    _SILENCED_AT_EXIT.append(True)

    def silence():
        sys.stderr.flush()
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)

    atexit.register(silence)


def _run(args):
    try:
        from keras_attn_cli import commands as cli

        if not args.verbose:
            cli.quiet()
        return cli.run(args)
    except KeyboardInterrupt:
        print("keras-attn: interrupted", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        # A model call may still run on its worker thread: end now rather
        # than wait for it at exit (every file a command writes is staged
        # and moved into place whole, so nothing is left half-written).
        os._exit(130)
    except BrokenPipeError:
        # The reader went away (`keras-attn translate ... | head`): end as
        # a Unix tool killed by SIGPIPE would, without a message.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except ModuleNotFoundError as err:
        top = (err.name or "").split(".")[0]
        if args.verbose:
            traceback.print_exc()
        extra = _EXTRAS.get(top)
        hint = f": pip install 'keras_attn[{extra}]'" if extra else ""
        print(
            f"keras-attn: error: this command needs the module {top!r}, "
            f"which is not installed{hint}",
            file=sys.stderr,
        )
        return 2
    except (ValueError, RuntimeError, OSError) as err:
        if args.verbose:
            traceback.print_exc()
        print(f"keras-attn: error: {_first_line(err)}", file=sys.stderr)
        return 2
    except Exception as err:  # anything else: one clean line
        if args.verbose:
            traceback.print_exc()
        print(
            f"keras-attn: error: {type(err).__name__}: {_first_line(err)} "
            "(--verbose shows the traceback)",
            file=sys.stderr,
        )
        return 2


def _first_line(err):
    text = str(err).strip() or type(err).__name__
    if isinstance(err, OSError) and err.strerror:
        where = err.filename and f" ({err.filename})" or ""
        return f"{err.strerror}{where}"
    return text.splitlines()[0]


if __name__ == "__main__":
    sys.exit(main())
