"""Many streams of a decoder-only bundle advanced in one call.

A bundle that `keras_attn.export.export_litertlm` wrote holds, beside
LiteRT-LM's own signatures, `decode_rows_<R>` signatures: `R` streams'
tokens at positions of their own, over caches `[R, H_kv, S, key_dim]`
that the call only reads, giving each stream's logits and each layer's
new key and value, which `RowLoop` writes into the stream's row in
place. The weights are read once a call, whatever the rows.

One `RowLoop` a copy of the model, on a thread of its own:

- a stream that enters takes a row when one is free (`max_rows`), its
  prompt is prefilled with the bundle's `prefill_<T>` signatures (as
  LiteRT-LM's engine prefills it), one chunk between two decode calls
  while other streams decode, then its caches move into its row;
- each decode call advances every stream in its rows by one token: the
  calls that cover the rows in use at the least cost, by each
  signature's measured time (`plan`);
- a stream leaves when it ends (a stop token, the context full), when
  its reader stops it (`stop` set, or its `Reader` closed or dropped),
  or when the model fails; the last row moves into its place.

A row's numbers are its own (no operation mixes rows), so each stream
gets the tokens it gets alone, greedy or seeded.
"""

import collections
import itertools
import queue
import re
import threading
import time
import weakref

import numpy as np

from keras_attn_runtime.turns import END, Reader

PREFIX = "decode_rows_"
TOKENS, POSITIONS, LOGITS = "tokens", "input_pos", "logits"
# How fast a signature's measured cost follows its latest calls.
SMOOTHING = 0.2
# How long an idle loop's thread waits before it looks whether the loop
# is still wanted.
IDLE_S = 0.5
_NUMBERS = itertools.count()


def row_counts(signatures):
    """The row counts `R` of `signatures`' `decode_rows_<R>`, sorted."""
    found = (re.fullmatch(PREFIX + r"(\d+)", name) for name in signatures)
    return sorted(int(m.group(1)) for m in found if m)


def cache_names(layer):
    """`((key, value) caches, (key, value) new entries)`: the names of
    layer `layer`'s in a `decode_rows_<R>` signature."""
    return (f"cache_k_{layer}", f"cache_v_{layer}"), (
        f"new_k_{layer}",
        f"new_v_{layer}",
    )


def engine_cache_names(layer):
    """The names of layer `layer`'s caches in LiteRT-LM's signatures."""
    return f"kv_cache_k_{layer}", f"kv_cache_v_{layer}"


def prefill_feed(prompt, done, n):
    """`(tokens [1, n], input_pos [n])` of the chunk of `prompt` from
    token `done`, padded to `n` with token 0 at position 0 (as
    LiteRT-LM's engine pads it), and the chunk's length."""
    chunk = prompt[done : done + n]
    tokens = np.zeros((1, n), "int32")
    positions = np.zeros((n,), "int32")
    tokens[0, : len(chunk)] = chunk
    positions[: len(chunk)] = np.arange(done, done + len(chunk))
    return tokens, positions, len(chunk)


def plan(count, costs):
    """The row counts of the calls that cover `count` rows at the least
    total cost (`costs`: a call's cost by its row count), largest
    first: 5 rows over `{1: 1, 4: 2, 16: 6}` are `[4, 1]`."""
    best = {0: (0.0, ())}
    for rest in range(1, count + 1):
        best[rest] = min(
            (cost + best[max(rest - n, 0)][0], (n,) + best[max(rest - n, 0)][1])
            for n, cost in costs.items()
        )
    return sorted(best[count][1], reverse=True)


class RowStream:
    """One stream in a `RowLoop`: its prompt's ids, the prefill chunks
    still to run, its search, and where its items go (`put`; a queue's
    by default, for `read`)."""

    def __init__(self, ids, chunks, search, stop=None, put=None):
        self.out = queue.SimpleQueue()
        self.put, self.stop, self.abandoned = put or self.out.put, stop, False
        self.ids, self.chunks, self.search = ids, list(chunks), search
        self.done, self.caches = 0, None  # prompt tokens prefilled
        self.token, self.position = ids[-1], len(ids) - 1

    def read(self):
        """The stream's items as they are decided (`turns.Reader`)."""
        return Reader(self)

    @property
    def leaving(self):
        return self.abandoned or (self.stop is not None and self.stop.is_set())


class RowLoop:
    """The decode loop of one copy of a bundle's model.

    Args:
        runners: the copy's runners by signature name (its
            `prefill_<T>`, `decode_rows_<R>`).
        engine_caches: `{name: spec}` of the prefill signatures' caches
            (`kv_cache_k_<l>`: shape `[1, H_kv, S, key_dim]`, dtype).
        context_length: the positions a stream may reach.
        max_rows: the streams decoded at once (default: the largest
            `decode_rows_<R>`); others wait for a row.
        name: the thread's name.

    Attributes:
        calls: decode calls run; rows_decoded: the rows they held in use.
    """

    def __init__(
        self, runners, engine_caches, context_length, max_rows=None, name=""
    ):
        counts = row_counts(runners)
        if not counts:
            raise ValueError(
                "Expected decode_rows_<R> signatures. Received: "
                f"{sorted(runners)}"
            )
        if max_rows is None:
            max_rows = counts[-1]
        if (
            isinstance(max_rows, bool)
            or not isinstance(max_rows, int)
            or max_rows < 1
        ):
            raise ValueError(
                "Expected max_rows to be a positive integer. Received: "
                f"max_rows={max_rows!r}"
            )
        self.runners, self.max_rows = runners, max_rows
        self.context_length = context_length
        self.costs = {n: float(n) for n in counts}  # until measured
        self._seen = {}
        layers = len(engine_caches) // 2
        self._names = [
            (engine_cache_names(i), *cache_names(i)) for i in range(layers)
        ]
        self._engine = engine_caches
        rows = max_rows + counts[-1]  # a last call's padding rows fit
        self._slots = {}
        for (engine_k, _), (k, v), _ in self._names:
            _, heads, length, dim = engine_caches[engine_k]["shape"]
            for slot in (k, v):  # LiteRT-LM's layout, a row a stream
                self._slots[slot] = np.zeros(
                    (rows, heads, length, dim), "float32"
                )
        self.calls = self.rows_decoded = 0
        self._pending = collections.deque()
        self._prefilling, self._decoding = collections.deque(), []
        self._wake = threading.Condition()
        self._closed = False
        self.thread_name = f"{name} #{next(_NUMBERS)}"
        threading.Thread(
            target=_run,
            args=(weakref.ref(self),),
            name=self.thread_name,
            daemon=True,
        ).start()

    @property
    def in_flight(self):
        """Streams decoding, prefilling or waiting for a row."""
        return len(self._pending) + len(self._prefilling) + len(self._decoding)

    def enter(self, stream):
        """Put `stream` in line for a row; returns it."""
        with self._wake:
            self._pending.append(stream)
            self._wake.notify()
        return stream

    def close(self):
        with self._wake:
            self._closed = True
            self._wake.notify()

    # -- The loop. ---------------------------------------------------------

    def _admit(self, timeout=None):
        """Wait for work (at most `timeout` seconds); move pending
        streams into free rows. `False` when the loop is closed, `None`
        when there was nothing to do."""
        with self._wake:
            if not self._closed and not self.in_flight:
                self._wake.wait(timeout)
            if self._closed:
                return False
            if not self.in_flight:
                return None
            held = len(self._prefilling) + len(self._decoding)
            while self._pending and held < self.max_rows:
                self._prefilling.append(self._pending.popleft())
                held += 1
        return True

    def _turn(self):
        """One round: streams that leave go; one prefill chunk (all of a
        prompt when nothing decodes); one decode of every row."""
        for stream in [s for s in self._prefilling if s.leaving]:
            self._prefilling.remove(stream)
            _hand(stream, END)
        for row in reversed(range(len(self._decoding))):
            if self._decoding[row].leaving:
                _hand(self._free(row), END)
        if self._prefilling:
            stream = self._prefilling[0]
            try:
                while stream.chunks:
                    self._prefill(stream)
                    if self._decoding:
                        break
            except Exception as err:  # the model failed: its reader hears
                self._prefilling.popleft()
                _hand(stream, err)
            else:
                if not stream.chunks:
                    self._prefilling.popleft()
                    self._start_decoding(stream)
        if self._decoding:
            try:
                logits = self._decode()
            except Exception as err:  # every stream decoding hears it
                for row in reversed(range(len(self._decoding))):
                    _hand(self._free(row), err)
                return
            self._advance(logits)

    def _prefill(self, stream):
        """Run `stream`'s next prefill chunk (padded with token 0 at
        position 0, as LiteRT-LM's engine pads it)."""
        if stream.caches is None:
            stream.caches = {
                name: np.zeros(spec["shape"], spec["dtype"])
                for name, spec in self._engine.items()
            }
        n = stream.chunks.pop(0)
        tokens, positions, taken = prefill_feed(stream.ids[:-1], stream.done, n)
        out = self.runners[f"prefill_{n}"](
            tokens=tokens, input_pos=positions, **stream.caches
        )
        stream.caches = {name: out[name] for name in stream.caches}
        stream.done += taken

    def _start_decoding(self, stream):
        """`stream`'s prefilled caches into the next row."""
        row = len(self._decoding)
        for (engine_k, engine_v), (k, v), _ in self._names:
            if stream.caches is None:  # a prompt of one token: nothing yet
                break
            for engine, slot in ((engine_k, k), (engine_v, v)):
                self._slots[slot][row] = stream.caches[engine][0]
        stream.caches = None
        self._decoding.append(stream)

    def _decode(self):
        """Every decoding row's next logits `(rows, V)`, each row's new
        keys and values written at its position."""
        count = len(self._decoding)
        tokens = np.zeros((count + max(self.costs),), "int32")
        positions = np.zeros_like(tokens)
        for row, stream in enumerate(self._decoding):
            tokens[row], positions[row] = stream.token, stream.position
        logits, start = [], 0
        for n in plan(count, self.costs):
            feed = {
                name: slot[start : start + n]
                for name, slot in self._slots.items()
            }
            name = f"{PREFIX}{n}"
            began = time.perf_counter()
            out = self.runners[name](
                tokens=tokens[start : start + n],
                input_pos=positions[start : start + n],
                **feed,
            )
            self._measure(name, n, time.perf_counter() - began)
            used = min(n, count - start)
            rows = np.arange(start, start + used)
            at = positions[start : start + used]
            for _, (k, v), (new_k, new_v) in self._names:
                self._slots[k][rows, :, at] = out[new_k][:used]
                self._slots[v][rows, :, at] = out[new_v][:used]
            logits.append(np.asarray(out[LOGITS]).reshape(n, -1)[:used])
            start += n
        self.calls += 1
        self.rows_decoded += count
        return np.concatenate(logits)

    def _measure(self, name, n, seconds):
        """Follow the cost of a call of `n` rows, in milliseconds (a
        signature's first call, which applies the delegate, does not
        count; its second sets the cost, later ones move it)."""
        seen = self._seen.get(name, 0)
        self._seen[name] = seen + 1
        if seen == 1:
            self.costs[n] = seconds * 1e3
        elif seen > 1:
            self.costs[n] += SMOOTHING * (seconds * 1e3 - self.costs[n])

    def _advance(self, logits):
        """Each decoding stream's token from its logits: handed over, or
        the stream ends (a stop token, the context full)."""
        for row in reversed(range(len(self._decoding))):
            stream = self._decoding[row]
            _, (token,) = stream.search.advance(logits[row : row + 1])
            stream.position += 1
            if stream.search.done.all():
                _hand(self._free(row), END)
                continue
            stream.token = int(token)
            if stream.position >= self.context_length - 1:
                self._free(row)  # its last token: the context is full
                if _hand(stream, stream.token):
                    _hand(stream, END)
            elif not _hand(stream, stream.token):
                self._free(row)

    def _free(self, row):
        """Take the stream in `row` out (returned); the last row moves
        into its place."""
        stream, last = self._decoding[row], len(self._decoding) - 1
        if row != last:
            for slot in self._slots.values():
                slot[row] = slot[last]
            self._decoding[row] = self._decoding[last]
        self._decoding.pop()
        return stream


def _hand(stream, item):
    """Give `item` to `stream`'s reader; False (the stream is dropped)
    when its `put` fails (say, an event loop that closed)."""
    try:
        stream.put(item)
    except Exception:  # noqa: BLE001 (the reader's failure, not ours)
        stream.abandoned = True
        return False
    return True


def _run(ref):
    """A loop's thread. It holds the loop only while it works, and ends
    when the loop is closed or gone."""
    while True:
        loop = ref()
        if loop is None:
            return
        work = loop._admit(timeout=IDLE_S)
        if work is False:
            return
        if work:
            loop._turn()
        del loop
