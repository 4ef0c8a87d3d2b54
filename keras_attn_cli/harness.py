"""The `keras-attn` process harness: quiet native logs, the `--timeout`
watchdog, and every error turned into one line and an exit status (2 for
an error, 130 for Ctrl-C, 141 for a closed pipe)."""

import contextlib
import os
import sys
import traceback


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


def watchdog(seconds):
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


# Flags taken anywhere on the line, before or after the command.
ANYWHERE = ("--verbose", "--sandbox")
# The extra that installs a module a command may need.
_EXTRAS = {
    "ai_edge_litert": "export",
    "onnx": "export",
    "onnxruntime": "export",
    "tf2onnx": "export",
    "matplotlib": "examples",
    "tensorflow": "cpu",
    "kserve": "serve",
    "model_signing": "signing",
    "OpenSSL": "signing",
}


def _interrupted(signum, frame):
    """Ctrl-C: say so and end, wherever the main thread is."""
    with contextlib.suppress(OSError, RuntimeError, ValueError):
        print("keras-attn: interrupted", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
    # A model call may still run on its worker thread: end now rather
    # than wait for it at exit (every file a command writes is staged and
    # moved into place whole, so nothing is left half-written).
    os._exit(130)


@contextlib.contextmanager
def exit_on_interrupt():
    """Ctrl-C ends the process (status 130) from its signal handler. The
    `KeyboardInterrupt` Python raises by default is dropped when it lands
    in a garbage-collector callback or a finalizer (JAX registers one,
    which runs while TensorFlow loads), and the command then ran on to
    its end. The previous handler comes back afterwards (a command run
    in-process); off the main thread, nothing changes."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def run(args):
    """Run the command `args` names: quietly (native logs to /dev/null,
    warnings off) unless `--verbose`; its exit status."""
    if args.verbose:
        with exit_on_interrupt():
            return _run(args)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    import warnings

    with (
        warnings.catch_warnings(),
        _quiet_native_stderr(),
        exit_on_interrupt(),
    ):
        warnings.simplefilter("ignore")
        code = _run(args)
    if "ai_edge_litert" in sys.modules:
        _quiet_at_exit()
    return code


def _quiet_at_exit():
    """LiteRT logs its accelerators' teardown from C++ destructors that
    run after Python has finished: descriptor 2 goes to /dev/null then
    (`keras_attn_runtime.native_logs`), as it does while the command runs."""
    from keras_attn_runtime import native_logs

    native_logs.quiet_at_exit(always=True)


def _run(args):
    try:
        from keras_attn_cli import commands as cli

        if not args.verbose:
            cli.quiet()
        return cli.run(args)
    except KeyboardInterrupt:  # raised by the command itself
        _interrupted(None, None)
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
        hint = (
            f": pip install -e '.[{extra}]' in a checkout (docs/install.md)"
            if extra
            else ""
        )
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
