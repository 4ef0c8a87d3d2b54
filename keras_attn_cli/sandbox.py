"""`keras-attn --sandbox`: the command again, inside bubblewrap.

A model from a stranger is a program. With `--sandbox` the command runs in
a child process under bubblewrap (`bwrap`, Debian's `bubblewrap`
package): no network (its own empty network namespace), the whole file
system read-only, a fresh empty `/tmp` as the only writable place (the
scratch folder, gone when the command ends; what the command reads from
below `/tmp`, its Python or the model it is given, is bound over it
read-only), its own process namespace,
and it dies with its parent. The parent reads nothing of the model: it
only forwards standard input and output and returns the child's exit
status. Results the command would write to a file (`explain --out`,
`export`) cannot be written from inside: the sandbox is for running
models, not for writing artifacts.
"""

import os
import shutil
import subprocess
import sys

INSTALL_HINT = (
    "--sandbox needs bubblewrap (bwrap), which is not installed: "
    "`apt-get install bubblewrap` on Debian or Ubuntu, `dnf install "
    "bubblewrap` on Fedora."
)


def bwrap_argv(command, visible=()):
    """The bubblewrap command line that runs `command` (a list) sandboxed;
    a `RuntimeError` saying how to install bubblewrap when it is absent.
    `visible`: paths the command reads that may live under `/tmp` (its
    Python, the package, the model it is given), bound read-only over the
    fresh `/tmp`, which would otherwise hide them."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise RuntimeError(INSTALL_HINT)
    shown = []
    for path in _under_tmp([*_own_paths(command), *visible]):
        shown += ["--ro-bind", path, path]
    return [
        bwrap,
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        *shown,
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--die-with-parent",
        "--new-session",
        "--setenv",
        "TMPDIR",
        "/tmp",
        "--setenv",
        "KERAS_HOME",
        "/tmp/.keras",
        "--",
        *command,
    ]


def _own_paths(command):
    """What running `command` reads besides its arguments: the Python it
    runs and its installation, and this package's checkout."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    program = os.path.realpath(command[0]) if command else sys.executable
    return [
        os.path.dirname(program),
        sys.prefix,
        sys.base_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        here,
    ]


def _under_tmp(paths):
    """The existing ones of `paths` below `/tmp`, each once, shortest
    first (a path inside another bound one is left to it)."""
    found = []
    for path in sorted({os.path.abspath(p) for p in paths}, key=len):
        if not path.startswith("/tmp/") or not os.path.exists(path):
            continue
        if not any(path.startswith(f"{kept}/") for kept in found):
            found.append(path)
    return found


def without_flag(argv, flag="--sandbox"):
    """`argv` with every `flag` removed."""
    return [a for a in argv if a != flag]


def run(argv):
    """Run `keras-attn argv` (without `--sandbox`) in the sandbox; its exit
    status, or 2 with one line on standard error when bwrap is missing."""
    command = [sys.executable, "-m", "keras_attn_cli", *without_flag(argv)]
    # The files the command is given (with their folders, read-only as
    # everything outside `/tmp` is: nothing can be written beside them),
    # and the data and models it finds through the environment, stay
    # visible where they are.
    given = [
        os.path.dirname(os.path.abspath(a))
        for a in without_flag(argv)
        if os.path.exists(a)
    ]
    given += [
        os.environ[k]
        for k in ("KERAS_ATTN_MODELS", "TFDS_DATA_DIR")
        if os.environ.get(k)
    ]
    try:
        full = bwrap_argv(command, given)
    except RuntimeError as err:
        print(f"keras-attn: error: {err}", file=sys.stderr)
        return 2
    env = {k: v for k, v in os.environ.items() if k != "KERAS_ATTN_SANDBOX"}
    env["KERAS_ATTN_SANDBOX"] = "1"
    return subprocess.call(full, env=env)
