"""The commands of `keras-attn`, a module each (parsing lives in
`keras_attn_cli.parser`; no module of `keras_attn` imports this package).

Every command checks its inputs before work and reports problems as a
`ValueError` naming the command-line flag; `keras_attn_cli.main` prints
them as one `keras-attn: error: ...` line with exit status 2.
"""

from keras_attn_cli.commands.explaining import explain
from keras_attn_cli.commands.exporting import export
from keras_attn_cli.commands.scoring import classify, demo, predict
from keras_attn_cli.commands.serving import serve
from keras_attn_cli.commands.signing import sign, verify
from keras_attn_cli.commands.translating import align, translate


def quiet():
    """Silence TensorFlow's Python-side logging (the C++ side is silenced
    by `TF_CPP_MIN_LOG_LEVEL`, set before import)."""
    import logging

    for name in ("tensorflow", "absl", "keras"):
        logging.getLogger(name).setLevel(logging.ERROR)


def run(args):
    command = args.command or "classify"
    return COMMANDS[command](args)


COMMANDS = {
    "serve": serve,
    "classify": classify,
    "demo": demo,
    "explain": explain,
    "export": export,
    "translate": translate,
    "align": align,
    "predict": predict,
    "sign": sign,
    "verify": verify,
}
