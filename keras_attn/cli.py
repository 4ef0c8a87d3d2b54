"""The `keras-attn` command line."""

import argparse
import os
import sys


def _demo(args):
    from keras_attn import demo

    demo.run(epochs=args.epochs)
    return 0


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-attn",
        description="keras_attn: attention layers, examples and export.",
    )
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("demo", help="train a tiny model on a generated task")
    p.add_argument("--epochs", type=int, default=8)
    p.set_defaults(func=_demo)
    return parser


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv or ["demo"])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
