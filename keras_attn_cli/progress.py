"""Progress where a person waits: one line of standard error, rewritten
in place ("translating 640/3000"), shown only on a terminal (nothing in
a file, a pipe or a test's capture) and wiped when the work ends."""

import sys


class Progress:
    """`update(done)` as the work advances, `close()` at its end (or use
    it as a context manager). `stream`: where it is drawn. Defaults to
    standard error."""

    def __init__(self, what, total, stream=None):
        self.what, self.total = what, total
        self.stream = sys.stderr if stream is None else stream
        try:
            self.shown = total > 1 and self.stream.isatty()
        except (AttributeError, ValueError):
            self.shown = False
        self.width = 0

    def update(self, done):
        self.last = done
        if self.shown:
            line = f"{self.what} {done}/{self.total}"
            self.width = max(self.width, len(line))
            self.stream.write("\r" + line.ljust(self.width))
            self.stream.flush()

    def emit(self, line):
        """Print `line` on standard output at once (flushed: a finished
        answer is not lost when the work is cut short), above the
        progress line, which is drawn again after it."""
        shown, self.last = self.width, getattr(self, "last", 0)
        self.close()
        print(line, flush=True)
        if shown:
            self.update(self.last)

    def close(self):
        if self.shown and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0

    def __enter__(self):
        self.update(0)
        return self

    def __exit__(self, *exc):
        self.close()
