"""LiteRT's and TensorFlow's C++ logs kept off the user's terminal.

LiteRT writes some forty lines to the process's standard error each
time it opens a model (its environment, the accelerators it tries, the
plugins it loads) and more as the process ends; TensorFlow's converter
writes its own. They bypass Python, so `captured()` points file
descriptor 2 at a temporary file while such a call runs: what was
written is dropped on success and added to the exception's notes on
failure, so that nothing a user needs is lost. Set
`KERAS_ATTN_NATIVE_LOGS=1` to see the logs as they come.
"""

import atexit
import contextlib
import os
import sys
import tempfile
import threading

ENV = "KERAS_ATTN_NATIVE_LOGS"
_LOCK = threading.Lock()
_DEPTH = [0]  # captures under way (one at a time: `_LOCK`)
_AT_EXIT = []


def shown():
    """Whether the user asked to see the native logs (`ENV` set to 1)."""
    return os.environ.get(ENV, "") == "1"


@contextlib.contextmanager
def captured():
    """File descriptor 2 to a temporary file while the block runs; on an
    exception, its last lines become a note of the exception. Nothing
    changes where `shown()`, or where descriptor 2 cannot be moved."""
    if shown() or _DEPTH[0]:  # shown, or already captured (nested)
        yield
        return
    with _LOCK:
        _DEPTH[0] += 1
        try:
            yield from _capture()
        finally:
            _DEPTH[0] -= 1


def _capture():
    """The body of `captured()`: a generator that yields once."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield  # descriptor 2 cannot be moved: leave it be
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        except BaseException as err:
            _restore(saved)
            sink.seek(0)
            tail = sink.read()[-4000:].decode("utf-8", "replace")
            if tail.strip() and hasattr(err, "add_note"):
                err.add_note(f"Native log ({ENV}=1 shows it live):\n{tail}")
            raise
        _restore(saved)


def _restore(saved):
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os.dup2(saved, 2)
    os.close(saved)


def quiet_at_exit(always=False):
    """Once: at exit, after Python's last words, descriptor 2 goes to
    /dev/null, where LiteRT's destructors log their teardown. `always`:
    even where `shown()` (a caller that silences every native log, as the
    command line without `--verbose`)."""
    if (shown() and not always) or _AT_EXIT:
        return
    _AT_EXIT.append(True)

    def silence():
        try:
            sys.stderr.flush()
            with open(os.devnull, "w") as null:
                os.dup2(null.fileno(), 2)
        except (OSError, ValueError):
            pass

    atexit.register(silence)
