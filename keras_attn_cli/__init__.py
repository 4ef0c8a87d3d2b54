"""The `keras-attn` command line.

This package imports nothing heavy, so `keras-attn --help` and argument
errors answer at once; TensorFlow and Keras are imported (quietly, unless
`--verbose`) only once a command runs, from `keras_attn_cli.commands`.
The parser is built from `keras_attn_cli.parser`'s tables; the process
harness (quiet native logs, the `--timeout` watchdog, every error as one
line and an exit status) is `keras_attn_cli.harness`.
"""

import os
import sys

from keras_attn_cli import harness
from keras_attn_cli.parser import (  # noqa: F401  (the public tables)
    COMMANDS,
    GLOBAL_FLAGS,
    LOG_LEVELS,
    SERVE_FLAGS,
    build_parser,
)


def main(argv=None):
    """`keras-attn`: parse `argv` (default: the command line) and run the
    command; its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    given = {flag for flag in harness.ANYWHERE if flag in argv}
    rest = [a for a in argv if a not in harness.ANYWHERE]
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
    timer = harness.watchdog(args.timeout) if args.timeout else None
    try:
        return harness.run(args)
    finally:
        if timer is not None:
            timer.cancel()


if __name__ == "__main__":
    sys.exit(main())
