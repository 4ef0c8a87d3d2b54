"""Where an export lands: destination checks, staging beside the
target, atomic replacement, stale temporaries, vocabulary files.

Every writer builds the artifact under a temporary path next to the
target and moves it into place only when it is complete, so a failure never
leaves a half-written artifact behind. A destination that exists is
replaced only when it is recognisably an earlier artifact of the same kind
(a SavedModel folder, a LiteRT flatbuffer) or with `overwrite=True`; the
working directory, its ancestors and the paths in `protect` (e.g. the
input model) and the folders that hold them are never replaced.
"""

import contextlib
import json
import os
import shutil
import tempfile

_TMP_PREFIX = ".tmp-export-"
_SAVED_MODEL_ENTRIES = {
    "saved_model.pb",
    "saved_model.pbtxt",
    "fingerprint.pb",
    "keras_metadata.pb",
    "variables",
    "assets",
}
KINDS = ("saved_model", "tflite", "onnx", "litertlm")


def is_saved_model_dir(path):
    """A folder holding a SavedModel and nothing else."""
    if not os.path.isdir(path) or os.path.islink(path):
        return False
    entries = set(os.listdir(path))
    return "saved_model.pb" in entries and entries <= _SAVED_MODEL_ENTRIES


def is_tflite_file(path):
    """A regular file with the LiteRT flatbuffer identifier `TFL3`."""
    if not os.path.isfile(path) or os.path.islink(path):
        return False
    with open(path, "rb") as f:
        head = f.read(8)
    return len(head) == 8 and head[4:8] == b"TFL3"


def is_litertlm_file(path):
    """A regular file with LiteRT-LM's magic `LITERTLM`."""
    if not os.path.isfile(path) or os.path.islink(path):
        return False
    with open(path, "rb") as f:
        return f.read(8) == b"LITERTLM"


def is_onnx_file(path):
    """A regular file that parses as an ONNX model with a graph."""
    if not os.path.isfile(path) or os.path.islink(path):
        return False
    with open(path, "rb") as f:
        if f.read(1) != b"\x08":  # ModelProto field 1, ir_version
            return False
    try:
        import onnx

        return len(onnx.load(path, load_external_data=False).graph.node) > 0
    except Exception:  # not ONNX, or onnx not installed: not provably ours
        return False


def is_within(inner, outer):
    """Whether `inner` is `outer` or lies below it (real paths)."""
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def check_destination(path, kind, overwrite=False, protect=(), arg="path"):
    """Raise a `ValueError` unless `path` may receive an export of `kind`.

    Args:
        path: the destination.
        kind: `"saved_model"` (a folder), `"tflite"`, `"onnx"` or
            `"litertlm"` (a file).
        overwrite: replace an existing destination that is not an earlier
            artifact of the same kind. Defaults to `False`.
        protect: paths that must survive: neither they nor the folders
            holding them may be replaced. Defaults to `()`.
        arg: the name of the argument (or CLI flag) in messages.

    Returns:
        The absolute destination path.
    """
    if kind not in KINDS:
        raise ValueError(f"Expected kind in {KINDS}. Received: kind={kind!r}")
    if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
        raise ValueError(f"Expected a path. Received: {arg}={path!r}")
    target = os.path.abspath(os.fspath(path))
    real = os.path.realpath(target)
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        raise ValueError(
            "The folder for the export does not exist. "
            f"Received: {arg}={os.fspath(path)!r}"
        )
    guarded = [os.getcwd(), os.path.expanduser("~")]
    for p in protect:
        p = os.path.realpath(os.fspath(p))
        guarded += [p, os.path.dirname(p)]
    for g in guarded:
        if is_within(os.path.realpath(g), real):
            raise ValueError(
                f"Refusing to replace {target!r}: it is or holds {g!r} "
                "(the working directory, the home folder, the input model "
                f"or its folder). Received: {arg}={os.fspath(path)!r}"
            )
    if os.path.lexists(target):
        same = {
            "saved_model": is_saved_model_dir,
            "tflite": is_tflite_file,
            "onnx": is_onnx_file,
            "litertlm": is_litertlm_file,
        }[kind](target)
        what = {
            "saved_model": "SavedModel folder",
            "tflite": "LiteRT file",
            "onnx": "ONNX file",
            "litertlm": "LiteRT-LM bundle",
        }[kind]
        if os.path.isdir(target) and not os.path.islink(target):
            found = "a folder"
        else:
            found = "a file"
        if not same and not overwrite:
            raise ValueError(
                f"{target!r} exists and is {found}, not an earlier "
                f"{what}; pass overwrite=True (--overwrite) to replace it. "
                f"Received: {arg}={os.fspath(path)!r}"
            )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(
            f"Cannot write in {parent!r} (permission denied). "
            f"Received: {arg}={os.fspath(path)!r}"
        )
    return target


# A temporary export folder carries this marker (a random token that its
# name repeats, the host, the target); only folders with a valid marker
# older than `STALE_SECONDS` are ever removed by a later export.
_MARKER = ".keras-attn-export.json"
STALE_SECONDS = 3600


def _marker(path):
    """The marker of a temporary export folder, or `None` if it is not
    one of ours (no marker, or a token that its name does not repeat)."""
    try:
        with open(os.path.join(path, _MARKER)) as f:
            marker = json.load(f)
    except (OSError, ValueError):
        return None
    token = marker.get("token") if isinstance(marker, dict) else None
    if not isinstance(token, str) or not os.path.basename(path).endswith(
        "-" + token
    ):
        return None
    return marker


def _died(marker):
    """Whether the process that wrote `marker` ran on this machine and is
    gone (a killed export); a live process of that id keeps its folder."""
    import socket

    pid = marker.get("pid")
    if marker.get("host") != socket.gethostname() or not isinstance(pid, int):
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


def clean_stale_temporaries(folder, prefix=_TMP_PREFIX, now=None):
    """Remove the temporary folders of exports killed in `folder`: those
    whose process on this machine is gone, and any older than
    `STALE_SECONDS` (written on another machine sharing the folder); only
    folders named `prefix*` holding a marker we wrote. An earlier
    artifact that a killed export had moved aside (its target now
    missing) is moved back first. Returns the removed paths."""
    import time

    now = time.time() if now is None else now
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        path = os.path.join(folder, name)
        if not name.startswith(prefix) or os.path.islink(path):
            continue
        marker = _marker(path)
        if marker is None or not (
            now - float(marker.get("time", now)) >= STALE_SECONDS
            or _died(marker)
        ):
            continue
        old, target = os.path.join(path, "old"), marker.get("target")
        if (
            isinstance(target, str)
            and os.path.dirname(target) == os.path.abspath(folder)
            and os.path.lexists(old)
            and not os.path.lexists(target)
        ):
            with contextlib.suppress(OSError):
                os.replace(old, target)  # the earlier artifact comes back
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def temporary_dir(parent=None, prefix=_TMP_PREFIX, target=None):
    """A fresh temporary folder with our marker (see `_marker`)."""
    import secrets
    import socket
    import time

    parent = parent or tempfile.gettempdir()
    clean_stale_temporaries(parent, prefix)
    token = secrets.token_hex(8)
    path = os.path.join(parent, f"{prefix}{os.getpid()}-{token}")
    os.mkdir(path, 0o700)
    marker = {
        "token": token,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "time": time.time(),
        "target": target,
    }
    with open(os.path.join(path, _MARKER), "w") as f:
        json.dump(marker, f)
    return path


def _identity(path):
    """What is at `path` now: `None`, or (device, inode, is a folder)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, os.path.isdir(path)


class _Stage:
    """Write into a temporary path beside `target`; `swap` moves it in.

    A file replaces its target with one `os.replace` (the earlier file is
    hard-linked, or copied, aside first, for `undo`): a kill at any moment
    leaves the earlier file or the new one. A folder takes two renames; a
    killed export's earlier folder is moved back by the next export. The
    target is checked again just before the move: whatever appeared or
    changed there since the export began is left alone (an error)."""

    def __init__(self, target):
        self.target = target
        self.before = _identity(target)
        self.tmp_dir = temporary_dir(os.path.dirname(target), target=target)
        self.tmp = os.path.join(self.tmp_dir, "new")
        self.old = os.path.join(self.tmp_dir, "old")
        self.moved_old = self.moved_new = False

    def swap(self):
        if not os.path.lexists(self.tmp):
            raise RuntimeError(f"The export wrote nothing at {self.tmp!r}.")
        if _identity(self.target) != self.before:
            raise ValueError(
                f"{self.target!r} changed while the export ran (something "
                "else wrote there); it is left as it is and nothing was "
                "replaced."
            )
        is_file = not os.path.isdir(self.tmp)
        if self.before is not None and is_file and not self.before[2]:
            try:
                os.link(self.target, self.old)
            except OSError:
                shutil.copy2(self.target, self.old)
            self.moved_old = "linked"
        elif self.before is not None:
            os.replace(self.target, self.old)
            self.moved_old = True
        os.replace(self.tmp, self.target)
        self.moved_new = True

    def undo(self):
        if self.moved_new and self.moved_old == "linked":
            os.replace(self.old, self.target)  # one rename back
            return
        if self.moved_new:
            if os.path.isdir(self.target) and not os.path.islink(self.target):
                shutil.rmtree(self.target, ignore_errors=True)
            elif os.path.lexists(self.target):
                os.remove(self.target)
        if self.moved_old:
            os.replace(self.old, self.target)

    def cleanup(self):
        shutil.rmtree(self.tmp_dir, ignore_errors=True)


@contextlib.contextmanager
def staged(*targets):
    """Yield temporary paths for `targets`; on success move every one into
    place, all or nothing: if a move fails, the ones done are undone."""
    stages = []
    try:
        for target in targets:
            stages.append(_Stage(os.path.abspath(target)))
        yield [s.tmp for s in stages]
        done = []
        try:
            for stage in stages:
                done.append(stage)
                stage.swap()
        except BaseException:
            for stage in reversed(done):
                with contextlib.suppress(OSError):
                    stage.undo()
            raise
    finally:
        for s in stages:
            s.cleanup()


@contextlib.contextmanager
def atomic_path(target):
    """Yield a temporary path; on success move it to `target`."""
    target = os.path.abspath(target)
    if not os.path.isdir(os.path.dirname(target)):
        raise ValueError(
            "The folder for the export does not exist. "
            f"Received: path={target!r}"
        )
    with staged(target) as (tmp,):
        yield tmp


# The SavedModel output of a raw-text model counting each text's known
# words (ids above the padding and out-of-vocabulary ids), so that a
# serving client can tell "no known word" as the other formats do.


def check_vocabulary_file(vectorizer, path, overwrite=False):
    """Raise unless `path` may receive the tokens of `vectorizer` (a
    `TextVectorization` layer or a list of tokens): it is new, holds the
    same tokens, or `overwrite`. Returns the file's text."""
    tokens = getattr(vectorizer, "get_vocabulary", lambda: vectorizer)()
    text = "".join(t + "\n" for t in tokens)
    target = os.path.abspath(path)
    if os.path.lexists(target) and not overwrite:
        same = os.path.isfile(target)
        if same:
            with open(target, "rb") as f:
                same = f.read() == text.encode("utf-8")
        if not same:
            raise ValueError(
                f"{target!r} exists and holds another vocabulary; pass "
                f"overwrite=True to replace it. Received: path={path!r}"
            )
    return text


def write_vocabulary(vectorizer, path, overwrite=False):
    """Write the tokens of `vectorizer` (a `TextVectorization` layer or a
    list of tokens), one per line. An existing file is replaced only when
    it holds the same tokens, or with `overwrite`."""
    text = check_vocabulary_file(vectorizer, path, overwrite)
    target = os.path.abspath(path)
    with atomic_path(target) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    return path
