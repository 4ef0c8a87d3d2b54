"""Iteration-level ("continuous") batching over a streaming file's rows.

One decode loop a file: every call to its `decode` signature advances
every request in flight by one token. A request takes free rows at the
next step (its `prefill` runs then, alone), its search (beam or greedy)
is its own, its tokens are handed over as they are decided, and it
leaves when it ends, or when its caller stops reading, its rows going to
the next request. The loop runs the smallest decode signature that holds
the rows in use (`StreamingDecoder.step_batches`), so one request costs
what it costs alone.

Rows are independent in such a step (a recurrent or attention decoder
over its own state), so each request's tokens are those it gets alone;
a file whose step reads its `index` (a position) cannot mix requests at
different steps and is refused.

    batcher = RowBatcher(decoder)
    for ids, alignment in batcher.search({"source": ids}):
        ...  # the tokens settled so far; the last yield is the answer
"""

import collections
import queue
import threading

import numpy as np

from keras_attn_runtime.search import BeamSearch, Handover, TokenSearch

_END = object()


class RowBatcher:
    """The decode loop of one `StreamingDecoder`, shared by its callers.

    Args:
        decoder: a `keras_attn_runtime.StreamingDecoder` whose step does
            not read its `index` (its config's `reads_index` is false).
        max_rows: the rows decoded at once (default: the largest decode
            signature's). A request waits until its rows are free.

    Attributes:
        steps: decode calls run so far.
        rows_decoded: rows those calls held in use (their sum).
    """

    def __init__(self, decoder, max_rows=None):
        if decoder.config.get("reads_index", True):
            raise ValueError(
                "Expected a streaming file whose decode step does not read "
                "its index (rows at different steps then decode in one "
                f"call). Received: {decoder.litert.model_path!r} (its config "
                "says reads_index or does not say)"
            )
        largest = max(decoder.step_batches)
        if max_rows is None:
            max_rows = largest
        if not isinstance(max_rows, int) or not 0 < max_rows:
            raise ValueError(
                "Expected max_rows to be a positive integer. "
                f"Received: max_rows={max_rows!r}"
            )
        if largest != -1 and max_rows > largest:
            raise ValueError(
                f"Expected max_rows <= {largest} (the file's largest decode). "
                f"Received: max_rows={max_rows!r}"
            )
        self.decoder, self.max_rows = decoder, max_rows
        self.steps, self.rows_decoded = 0, 0
        self._pending = collections.deque()
        self._wake = threading.Condition()
        self._active, self._slots = [], None
        self._thread = None

    def search(
        self, inputs, greedy_search=False, first_token=None, max_length=None
    ):
        """Yield `(ids, alignment (n, S) or None)` as the request's
        settled tokens grow (a greedy search's every step; a beam
        search's when its beams agree on more); the last yield is its
        answer, as the file's search gives it alone. `inputs`: the
        `prefill` inputs of one sentence (e.g. `{"source": ids (1, S)}`).
        `first_token`: the first step's token (default: the config's
        `start_id`; a decoder-only prompt's last token, its others
        prefilled); `max_length`: the most tokens this request gets, at
        most the config's (e.g. what a prompt leaves of a context).
        Closing the generator frees the request's rows at the next
        step."""
        if max_length is not None and (
            isinstance(max_length, bool)
            or not isinstance(max_length, int)
            or max_length < 1
        ):
            raise ValueError(
                "Expected max_length to be a positive integer. Received: "
                f"max_length={max_length!r}"
            )
        request = _Request(
            self.decoder, inputs, greedy_search, first_token, max_length
        )
        if request.width > self.max_rows:
            raise ValueError(
                f"Expected a beam of at most {self.max_rows} rows "
                f"(max_rows). Received: beam_width={request.width}"
            )
        with self._wake:
            self._pending.append(request)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="keras-attn-rows", daemon=True
                )
                self._thread.start()
            self._wake.notify()
        try:
            while (item := request.out.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            request.cancelled = True

    @property
    def capacity(self):
        """The sentences the loop decodes at once (`max_rows` over a
        sentence's rows: its beam width, or 1 for greedy search)."""
        config = self.decoder.config
        beam = config.get("search") == "beam"
        return self.max_rows // (config["beam_width"] if beam else 1)

    @property
    def in_flight(self):
        """Requests decoding or waiting for rows."""
        return len(self._active) + len(self._pending)

    def _loop(self):
        while True:
            with self._wake:
                while not self._pending and not self._active:
                    self._wake.wait()
                admitted = self._admit()
            try:
                for request in admitted:
                    self._prefill(request)
                if self._active:
                    self._step()
            except Exception as err:  # the file failed: tell every caller
                for request in self._active:
                    request.out.put(err)
                    request.finished = True
            self._retire()

    def _admit(self):
        """The pending requests whose rows fit now, in arrival order."""
        used = sum(r.width for r in self._active)
        admitted = []
        while self._pending and self._pending[0].cancelled:
            self._pending.popleft()
        while self._pending and used + self._pending[0].width <= self.max_rows:
            request = self._pending.popleft()
            request.base, used = used, used + request.width
            admitted.append(request)
            self._active.append(request)
        return admitted

    def _prefill(self, request):
        state = self.decoder.start(**request.inputs)
        if self._slots is None:
            rows = self._capacity()
            self._slots = {
                name: np.zeros((rows, *value.shape[1:]), value.dtype)
                for name, value in state.items()
            }
        rows = slice(request.base, request.base + request.width)
        for name, value in state.items():
            self._slots[name][rows] = value[:1]  # each beam, one sentence

    def _capacity(self):
        sizes = [n for n in self.decoder.step_batches if n != -1]
        return max(sizes + [self.max_rows])

    def _step(self):
        used = sum(r.width for r in self._active)
        batch = self.decoder.step_rows(used)
        tokens = np.zeros((batch,), "int32")
        for request in self._active:
            tokens[request.base : request.base + request.width] = request.tokens
        state = {name: value[:batch] for name, value in self._slots.items()}
        logits, new, alignment = self.decoder.step(tokens, 0, state)
        self.steps, self.rows_decoded = self.steps + 1, self.rows_decoded + used
        for name in self.decoder.updated_state:
            self._slots[name][:batch] = new[name]
        for request in self._active:
            rows = slice(request.base, request.base + request.width)
            align = None if alignment is None else alignment[rows]
            kept = request.advance(logits[rows], align)
            if kept is not None:  # the beams' states, reordered
                for name in self.decoder.updated_state:
                    block = self._slots[name][rows]
                    self._slots[name][rows] = block[kept]

    def _retire(self):
        """Drop finished and abandoned requests; the others' rows move
        down so that the rows in use stay the first ones."""
        kept, position = [], 0
        for request in self._active:
            if request.finished or request.cancelled:
                if not request.finished:
                    request.out.put(_END)
                continue
            if request.base != position:
                rows = slice(request.base, request.base + request.width)
                for value in self._slots.values():
                    value[position : position + request.width] = value[rows]
                request.base = position
            kept.append(request)
            position += request.width
        self._active = kept


class _Request:
    """One sentence's search in the loop: its rows, its tokens, its
    searcher, and the queue its caller reads."""

    def __init__(
        self, decoder, inputs, greedy_search, first_token=None, max_length=None
    ):
        config = decoder.config
        self.inputs, _ = decoder.padded(inputs)
        self.end_id, self.max_length = config["end_id"], config["max_length"]
        if max_length is not None:
            self.max_length = min(int(max_length), self.max_length)
        self.banned_ids = tuple(config.get("banned_ids", ()))
        beam = config.get("search") == "beam" and not greedy_search
        self.width = config["beam_width"] if beam else 1
        self.search = TokenSearch(1, self.end_id, banned_ids=self.banned_ids)
        if beam:  # the mask spans the state's source positions
            widest, _ = decoder.padded(inputs, widest=True)
            source = next(iter(widest.values()))
            self.search = BeamSearch(
                1,
                self.end_id,
                beam_width=self.width,
                length_penalty=config["length_penalty"],
                coverage_penalty=config["coverage_penalty"],
                source_mask=source[:1] != 0,
                banned_ids=self.banned_ids,
            )
        self.handover = Handover(self.search)
        first = config["start_id"] if first_token is None else first_token
        self.tokens = np.full((self.width,), first, "int32")
        self.out, self.base, self.index = queue.Queue(), 0, 0
        self.finished = self.cancelled = False

    def advance(self, logits, alignment):
        """One step's `logits (width, V)`: the next tokens, and what the
        search decided handed to the caller (`Handover`); returns the
        rows' reordering (`None`: as they are)."""
        self.index += 1
        kept, self.tokens = self.search.advance(logits, alignment)
        (decided,) = self.handover.take(last=self.index == self.max_length)
        if decided is not None:
            self.out.put(decided)
        if self.handover.finished:
            self.finished = True
            self.out.put(_END)
        return kept


class Loops:
    """Several decode loops over copies of one streaming file, each run
    by the `Interpreter` (whose calls let other threads run: one loop a
    core), a request going to the loop with the fewest in flight. With
    `cpu_kernels="builtin"` the numbers are `CompiledModel`'s builtin
    kernels' (a translator's own file passes what it runs on).

    Args:
        model_path: the streaming file (or a one-call file that also
            streams).
        loops: how many. Defaults to `1`.
        max_rows: each loop's (see `RowBatcher`).
        cpu_kernels: as `LiteRTModel` takes them. Defaults to `"auto"`
            (under the Interpreter: XNNPACK's defaults).

    Attributes:
        batchers: the loops' `RowBatcher`s.
    """

    def __init__(self, model_path, loops=1, max_rows=None, cpu_kernels="auto"):
        from keras_attn_runtime.artifact import load_verified
        from keras_attn_runtime.engine import LiteRTModel
        from keras_attn_runtime.streaming import StreamingDecoder

        if isinstance(loops, bool) or not isinstance(loops, int) or loops < 1:
            raise ValueError(
                f"Expected loops to be a positive integer. Received: "
                f"loops={loops!r}"
            )
        self.batchers = []
        for _ in range(loops):
            data, model = load_verified(model_path)
            litert = LiteRTModel(
                data,
                model,
                model_path,
                cpu_kernels=cpu_kernels,
                interpreter=True,
            )
            decoder = StreamingDecoder(model_path, litert=litert)
            self.batchers.append(RowBatcher(decoder, max_rows))

    def search(self, inputs, greedy_search=False):
        """`RowBatcher.search` on the loop with the fewest requests."""
        batcher = min(self.batchers, key=lambda b: b.in_flight)
        return batcher.search(inputs, greedy_search)

    @property
    def in_flight(self):
        return sum(b.in_flight for b in self.batchers)

    @property
    def capacity(self):
        """The sentences the loops decode at once."""
        return sum(b.capacity for b in self.batchers)

    @property
    def steps(self):
        return sum(b.steps for b in self.batchers)

    @property
    def rows_decoded(self):
        return sum(b.rows_decoded for b in self.batchers)
