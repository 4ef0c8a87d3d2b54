"""Helpers of the tests of threads and loops: a decoder step slowed so
that callers surely overlap, a wait for a batcher to empty, and a check
that the threads something made end with it."""

import gc
import threading


def slowed(decoder, seconds):
    """`decoder`'s step taking `seconds` more: callers started together
    then surely overlap, however fast the machine."""
    import time

    step = decoder.step

    def slow_step(*args):
        time.sleep(seconds)
        return step(*args)

    decoder.step = slow_step


def drained(batcher, seconds=5):
    """Whether `batcher` holds no request within `seconds` (a request
    leaves its loop just after handing over its last tokens)."""
    import time

    deadline = time.monotonic() + seconds
    while batcher.in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    return batcher.in_flight == 0


def threads_end_with(make, count):
    """`make()`'s new threads (`count` of them) end once what it made is
    gone."""
    before = set(threading.enumerate())
    made = make()
    own = set(threading.enumerate()) - before
    assert len(own) == count
    del made
    gc.collect()
    for thread in own:
        thread.join(10)
        assert not thread.is_alive()
