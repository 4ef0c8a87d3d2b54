"""`keras-attn serve`'s flags: the tables of its settings (their
defaults are the server's `LIMITS` and `BATCHING`), its polling periods,
and its arguments, as `keras_attn_cli.parser` adds them. Nothing heavy
is imported here."""

import argparse

# The kinds of model file, in the order a folder is read
# (`keras_attn_runtime.opener.KINDS`; a test ties them).
FILE_KINDS = ("saved_model", "litertlm", "keras", "litert", "onnx")

# `keras-attn serve --log-level`'s choices (`keras_attn_cli.serving.serve`'s
# LOG_LEVELS; a test ties them).
LOG_LEVELS = ("debug", "info", "warning", "error")

# `keras-attn serve`'s settings: (flag, type, default, help). The
# defaults are `keras_attn_cli.serving.serve`'s LIMITS and BATCHING.
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
    (
        "--max-streams",
        "streams",
        None,
        "streams one model decodes at once (OpenAI), a number or auto: "
        "what its decode loops hold at once (a decoder-only bundle: the "
        "rows its copies decode in one call), else 8",
    ),
    (
        "--header-timeout",
        float,
        10.0,
        "seconds a connection has to send a request's headers, after it "
        "opens or its request begins; then it is closed",
    ),
    (
        "--max-connections",
        int,
        1000,
        "HTTP connections open at once; one more is closed at once",
    ),
    (
        "--max-queue",
        int,
        64,
        "generative requests that wait for a place to decode, a model; "
        "one more is a 429 (0: none wait)",
    ),
    ("--max-batch-size", int, 32, "most examples merged into one call"),
    ("--batch-wait-ms", float, 5.0, "longest wait for a batch to fill"),
)


# `keras-attn serve`'s polling periods, TensorFlow Serving's flags:
# (flag, default, help); 0 reads once, at start.
POLL_FLAGS = {
    "--file-system-poll-wait-seconds": (
        1.0,
        "seconds between looks at each folder of numbered versions, for "
        "new and removed versions (0: read once, at start)",
    ),
    "--model-config-file-poll-wait-seconds": (
        0.0,
        "seconds between reads of --model-config-file, which add and "
        "remove models (0: read once, at start)",
    ),
}


def stream_count(value):
    """`--max-streams`: a number (`serve` checks that it is positive), or
    `auto` (`None`)."""
    if value == "auto":
        return None
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number or auto, got {value!r}"
        ) from None


# The types a serve flag names (`SERVE_FLAGS`).
FLAG_TYPES = {"streams": stream_count}


def _shown(default):
    """A serve flag's default as `--help` says it (`None`: auto)."""
    return "auto" if default is None else default


def serve_arguments(flag, require_signature):
    """`serve`'s arguments, as `(names, settings)` pairs (`flag` makes
    one, `require_signature(verb)` the signature flag shared with other
    commands)."""
    return (
        flag(
            "model",
            nargs="*",
            help="a shipped model's name, a folder, a SavedModel, a "
            ".keras or a .tflite (default: every shipped model, under "
            "its folder name)",
        ),
        *(
            flag(
                name,
                type=FLAG_TYPES.get(kind, kind),
                default=default,
                help=f"{text} (default: {_shown(default)})",
            )
            for name, kind, default, text in SERVE_FLAGS
        ),
        flag(
            "--model-versions",
            default="latest",
            help="of a folder of numbered versions (MODEL/1/, MODEL/2/): "
            "latest, latest:N (the N newest), all or N,M (default: "
            "latest)",
        ),
        *(
            flag(
                name,
                type=float,
                default=default,
                metavar="SECONDS",
                help=f"{text} (default: {default:g})",
            )
            for name, (default, text) in POLL_FLAGS.items()
        ),
        flag(
            "--model-config-file",
            default=None,
            metavar="FILE",
            help="TensorFlow Serving's model config file (text "
            "protobuf, model_config_list), instead of MODEL arguments "
            "(default: none)",
        ),
        require_signature("serve"),
        flag(
            "--prefer",
            default=None,
            choices=FILE_KINDS,
            help="the kind of file a model folder holding several is "
            "served from, at every door (default: the first of "
            + ", ".join(FILE_KINDS)
            + "; a SavedModel first, as TensorFlow Serving reads it)",
        ),
        *_server_arguments(flag),
    )


def _server_arguments(flag):
    """`serve`'s arguments for access, naming and the log."""
    return (
        flag(
            "--auth-token-file",
            default=None,
            help="a file holding a bearer token that every route but "
            "the health routes then needs (default: none)",
        ),
        flag(
            "--enable-model-management",
            action="store_true",
            help="turn on KServe's /v2/repository load and unload "
            "routes (default: off)",
        ),
        flag(
            "--model-name",
            default=None,
            metavar="NAME",
            help="the name clients use for the one model served "
            "(default: its folder's or file's name)",
        ),
        flag(
            "--log-level",
            default="info",
            choices=LOG_LEVELS,
            help="the server's log: info logs each request, warning "
            "each client error in one line (default: info)",
        ),
        flag(
            "--enable-docs",
            action="store_true",
            help="turn on the OpenAPI pages, /openapi.json and /docs "
            "(default: off)",
        ),
    )
