"""`keras_attn_runtime.turns`: streams served in turn, a call a turn, by
a thread a copy; what each stream decides reaches its reader in order,
and the threads end with their line."""

import threading

from keras_attn_runtime.turns import Line
from tests.timing import threads_end_with  # noqa: F401


def counting(tag, n, seen, gate=None):
    """A stream's calls: `n` of them, each noting `(tag, i, copy)` in
    `seen` and putting `i`; the first waits for `gate` when given."""

    def calls(stream):
        for i in range(n):
            if gate is not None and i == 0:
                gate.wait(10)
            seen.append((tag, i, stream.copy))
            stream.put(i)
            yield

    return calls


def test_streams_take_turns_a_call_at_a_time():
    line, seen, gate = Line(["copy"], "test copy"), [], threading.Event()
    first = line.enter(counting("a", 3, seen, gate)).read()
    second = line.enter(counting("b", 3, seen)).read()
    gate.set()  # both in the line before the first call ends
    assert list(first) == [0, 1, 2] and list(second) == [0, 1, 2]
    assert [(tag, i) for tag, i, _ in seen] == [
        ("a", 0),
        ("b", 0),
        ("a", 1),
        ("b", 1),
        ("a", 2),
        ("b", 2),
    ]
    assert {copy for _, _, copy in seen} == {"copy"}


def test_a_stopped_stream_ends_at_its_next_turn():
    line, seen = Line(["copy"], "test copy"), []
    stop = threading.Event()
    stop.set()
    assert list(line.enter(counting("a", 5, seen), stop).read()) == []
    assert seen == []


def test_the_threads_end_with_their_line():
    threads_end_with(lambda: Line(["one", "two"], "test copy"), 2)
