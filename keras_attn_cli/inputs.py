"""Texts for the CLI: arguments, files read line by line in bounded
memory, stdin."""

import os
import sys

MAX_LINE_BYTES = 1 << 16
# Texts scored per batch when reading a file or standard input.
CHUNK = 256


def iter_text_lines(path, flag, limit=MAX_LINE_BYTES, blank=False):
    """The lines of a UTF-8 file (`-`: standard input), one at a time,
    each cut at `limit` bytes (the rest of a longer line is read and
    dropped): memory stays bounded however long the input. Blank lines
    are kept when `blank` (a row each, so that N lines in give N rows
    out), else skipped. Errors name `flag`, the option that gave the
    path."""
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
                if blank or part.strip():
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
    """Positional texts, then every `--file` line (a blank one included:
    one row per line), one at a time."""
    given = False
    for text in getattr(args, "text", None) or []:
        given = True
        yield text[:MAX_LINE_BYTES]
    path = getattr(args, "file", None)
    if path is not None:
        read = False
        for text in iter_text_lines(path, "--file", blank=True):
            given = read = True
            yield text
        if not read:
            where = "standard input" if path == "-" else "the file"
            raise ValueError(
                f"Expected at least one line of text. Received: --file="
                f"{path!r}, and {where} is empty"
            )
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
    """A clear error naming `flag` for a sentence among `texts` that is
    empty or has no letter or digit (emoji or punctuation only: nothing a
    translator reads as a word)."""
    for i, text in enumerate(texts):
        where = flag if len(texts) == 1 else f"{flag} {i + 1} of {len(texts)}"
        if not text.strip():
            raise ValueError(
                f"Expected a non-empty sentence. Received: {where}="
                f"{snippet(text)!r}"
            )
        if not any(c.isalnum() for c in text):
            raise ValueError(
                "Expected a sentence with at least one letter or digit. "
                f"Received: {where}={snippet(text)!r}"
            )


def snippet(text, width=80):
    text = " ".join(text[: 4 * width].split())  # never splits a long text
    return text if len(text) <= width else text[: width - 3] + "..."


def check_clause_lengths(translator, texts, flag="text"):
    """A clear error naming `flag`, before anything is printed, for a text
    with a piece longer than a LiteRT `translator` reads (the piece it
    would cut)."""
    from keras_attn_runtime.signature import PromptTooLong

    for text in texts:
        try:
            translator.check_window(text)
        except PromptTooLong as err:
            raise ValueError(
                f"Expected at most {err.limit} {err.unit} per sentence or "
                "clause (the translator's window; it reads no more). "
                f"Received: {flag}={snippet(text)!r}, {err.received} "
                f"{err.unit}; split it into shorter sentences"
            ) from None
