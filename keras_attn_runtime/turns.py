"""Streams served in turn by a thread a copy of a model.

Every stream waits in one line (`Line`); each copy has a thread of its
own that takes the stream at the head of the line, runs its next call,
and puts it back at the end. Streams therefore interleave call by call,
one stream costs what it costs alone, and only the copies' threads run
the model, whatever the number of streams (their readers only wait, or
are handed their items: `put`).

A stream is a generator function `calls(stream)` that runs one call a
`next` on `stream.copy` and gives what it decides to `stream.put`. It
ends when the generator does (`put(END)`), when it fails (`put(err)`),
or when its reader stops it: `stop` (a `threading.Event`) set, or its
`Reader` closed or dropped.

    line = Line(copies, "my model copy")
    for item in line.enter(calls).read():
        ...
"""

import queue
import threading
import weakref

# The item after a stream's last one.
END = object()


class Stream:
    """One stream in a `Line`: `calls(self)` (a generator that runs one
    call a `next`, on the copy in `copy`, and gives its items to `put`),
    until it ends (`put(END)`), fails (`put(err)`), or its reader stops
    it (`stop` set, or the reader gone). `put` defaults to a queue's, for
    `read`."""

    def __init__(self, calls, stop=None, put=None):
        self.out = queue.SimpleQueue()
        self.put, self.stop, self.copy = put or self.out.put, stop, None
        self.calls, self.abandoned = calls(self), False

    def turn(self, copy):
        """Run the next call on `copy`; whether the stream goes on."""
        if self.abandoned or (self.stop is not None and self.stop.is_set()):
            self.calls.close()
            self.put(END)
            return False
        self.copy = copy
        try:
            next(self.calls)
        except StopIteration:
            self.put(END)
            return False
        except Exception as err:  # the reader gets the model's failure
            self.put(err)
            return False
        return True

    def read(self):
        """The stream's items, as its calls decide them (`Reader`)."""
        return Reader(self)


class Reader:
    """An iterator over a `Stream`'s items; closing it, or dropping it
    read or not, takes the stream out of the line at its next turn."""

    def __init__(self, stream):
        self._stream = stream

    def __iter__(self):
        return self

    def __next__(self):
        stream = self._stream
        if stream.abandoned:
            raise StopIteration
        item = stream.out.get()
        if item is END:
            stream.abandoned = True
            raise StopIteration
        if isinstance(item, Exception):
            stream.abandoned = True
            raise item
        return item

    def close(self):
        self._stream.abandoned = True

    __del__ = close


class Line:
    """The line of streams that `copies` serve, each on a thread named
    `name` and its number; the threads end with the line.

    Args:
        copies: what a stream's calls run on (`stream.copy`), one a
            thread.
        name: the threads' name.
    """

    def __init__(self, copies, name):
        self._waiting = queue.SimpleQueue()
        for i, copy in enumerate(copies):
            threading.Thread(
                target=_serve_turns,
                args=(self._waiting, copy),
                name=f"{name} {i}",
                daemon=True,
            ).start()
        weakref.finalize(self, _close, self._waiting, len(copies))

    def enter(self, calls, stop=None, put=None):
        """A `Stream` of `calls`, at the end of the line."""
        stream = Stream(calls, stop, put)
        self._waiting.put(stream)
        return stream


def _serve_turns(waiting, copy):
    """A copy's thread: the stream at the head of the line has its next
    call, then goes to the back, until `None` (the line is gone). A
    stream whose `put` fails (its reader's, say an event loop closed) is
    dropped; the thread goes on with the others."""
    while (stream := waiting.get()) is not None:
        try:
            going = stream.turn(copy)
        except Exception:  # noqa: BLE001 (the reader's failure, not ours)
            going = False
        if going:
            waiting.put(stream)


def _close(waiting, threads):
    for _ in range(threads):
        waiting.put(None)
