"""Texts for the CLI: arguments, files read line by line in bounded
memory, stdin."""

import os
import sys

MAX_LINE_BYTES = 1 << 16
# Texts scored per batch when reading a file or standard input.
CHUNK = 256


def iter_text_lines(path, flag, limit=MAX_LINE_BYTES):
    """The non-blank lines of a UTF-8 file (`-`: standard input), one at a
    time, each cut at `limit` bytes (the rest of a longer line is read
    and dropped): memory stays bounded however long the input. Errors
    name `flag`, the option that gave the path."""
    if path != "-" and not os.path.isfile(path):
        raise ValueError(f"No such file. Received: {flag}={path!r}")
    f = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    offset = 0
    try:
        while True:
            line = f.readline(limit)
            if not line:
                return
            start = offset
            offset += len(line)
            if len(line) == limit and not line.endswith(b"\n"):
                while True:  # drop the rest of an over-long line
                    rest = f.readline(limit)
                    offset += len(rest)
                    if not rest or rest.endswith(b"\n"):
                        break
                line = _whole_characters(line)
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(
                    f"Expected UTF-8 text ({err.reason} at byte "
                    f"{start + err.start}). Received: {flag}={path!r}"
                ) from None
            for part in text.splitlines():  # \r and other line breaks
                if part.strip():
                    yield part
    finally:
        if f is not sys.stdin.buffer:
            f.close()


def _whole_characters(data):
    """`data` without a UTF-8 character cut at its end (at most 3 bytes
    go; a line that is not UTF-8 anyway stays, for the decoder's error)."""
    for cut in range(4):
        head = data[: len(data) - cut]
        try:
            head.decode("utf-8")
            return head
        except UnicodeDecodeError:
            continue
    return data


def read_text_file(path, flag):
    """Non-blank lines of a UTF-8 file (`-`: standard input), each cut at
    `MAX_LINE_BYTES`; errors name `flag`."""
    return list(iter_text_lines(path, flag))


def iter_texts(args, flag="text"):
    """Positional texts, then `--file` lines, one at a time."""
    given = False
    for text in getattr(args, "text", None) or []:
        given = True
        yield text[:MAX_LINE_BYTES]
    if getattr(args, "file", None) is not None:
        for text in iter_text_lines(args.file, "--file"):
            given = True
            yield text
    if not given:
        raise ValueError(
            f"Nothing to read: give {flag} arguments or --file. "
            "Received: no text"
        )


def read_texts(args, default=None, flag="text"):
    """Positional texts plus `--file` lines (`-`: standard input)."""
    try:
        return list(iter_texts(args, flag))
    except ValueError as err:
        if default is not None and str(err).startswith("Nothing to read"):
            return list(default)
        raise


def check_sentences(texts, flag="text"):
    """A clear error naming `flag` for an empty sentence among `texts`."""
    for text in texts:
        if not text.strip():
            raise ValueError(
                "Expected a non-empty sentence. Received: "
                f"{flag}={snippet(text)!r}"
            )


def snippet(text, width=80):
    text = " ".join(text[: 4 * width].split())  # never splits a long text
    return text if len(text) <= width else text[: width - 3] + "..."
