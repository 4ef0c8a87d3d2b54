"""`keras-attn --sandbox`: the command again, inside bubblewrap.

A model from a stranger is a program. With `--sandbox` the command runs in
a child process under bubblewrap (`bwrap`, Debian's `bubblewrap`
package): no network (its own empty network namespace), the whole file
system read-only, a fresh empty `/tmp` as the only writable place (the
scratch folder, gone when the command ends), its own process namespace,
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


def bwrap_argv(command):
    """The bubblewrap command line that runs `command` (a list) sandboxed;
    a `RuntimeError` saying how to install bubblewrap when it is absent."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise RuntimeError(INSTALL_HINT)
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


def without_flag(argv, flag="--sandbox"):
    """`argv` with every `flag` removed."""
    return [a for a in argv if a != flag]


def run(argv):
    """Run `keras-attn argv` (without `--sandbox`) in the sandbox; its exit
    status, or 2 with one line on standard error when bwrap is missing."""
    command = [sys.executable, "-m", "keras_attn_cli", *without_flag(argv)]
    try:
        full = bwrap_argv(command)
    except RuntimeError as err:
        print(f"keras-attn: error: {err}", file=sys.stderr)
        return 2
    env = {k: v for k, v in os.environ.items() if k != "KERAS_ATTN_SANDBOX"}
    env["KERAS_ATTN_SANDBOX"] = "1"
    return subprocess.call(full, env=env)
