"""Admission of generative answers (OpenAI's routes), per model: at most
`running` answers decode at once (`--max-streams`); a request that finds
none free waits in line, up to `waiting` requests (`--max-queue`); one
more is refused (a 429 with `Retry-After`). The answers' timings go to
the Prometheus metrics route, under vLLM's names after our prefix:

- `keras_attn:time_to_first_token_seconds` (from arrival, waiting
  included, to the first piece),
- `keras_attn:inter_token_latency_seconds` (between two pieces),
- `keras_attn:request_queue_time_seconds` (waiting for a place),
- `keras_attn:num_requests_running` and `keras_attn:num_requests_waiting`
  (gauges),

each labelled with `model_name`.
"""

import asyncio
import time

METRICS = None  # made on first use (`metrics`)
# Seconds: time to the first token and between tokens, waiting.
TOKEN_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


class TooBusy(Exception):
    """No place to decode and none to wait in: the message says which
    limit, for a 429."""


def metrics():
    """`{name: metric}` on Prometheus's default registry (the one
    KServe's `/metrics` reads)."""
    global METRICS
    if METRICS is None:
        from prometheus_client import Gauge, Histogram

        label = ["model_name"]
        METRICS = {
            "ttft": Histogram(
                "keras_attn:time_to_first_token_seconds",
                "Time to the first token of an answer, waiting included",
                label,
                buckets=TOKEN_BUCKETS,
            ),
            "itl": Histogram(
                "keras_attn:inter_token_latency_seconds",
                "Time between two pieces of a streamed answer",
                label,
                buckets=TOKEN_BUCKETS,
            ),
            "queue": Histogram(
                "keras_attn:request_queue_time_seconds",
                "Time a request waited for a place to decode",
                label,
                buckets=TOKEN_BUCKETS,
            ),
            "running": Gauge(
                "keras_attn:num_requests_running",
                "Answers decoding",
                label,
            ),
            "waiting": Gauge(
                "keras_attn:num_requests_waiting",
                "Requests waiting for a place to decode",
                label,
            ),
        }
    return METRICS


class Admission:
    """One model's places: `running` at once, `waiting` more in line.

    `async with admission.place():` waits for a place (or raises
    `TooBusy` at once when the line is full) and frees it at the end;
    `timed(pieces, arrived)` wraps an answer's pieces to record its
    time to the first token and between tokens.
    """

    def __init__(self, name, running, waiting):
        self.name, self.running, self.waiting = name, running, waiting
        self.decoding = self.queued = 0
        self._free = None  # an asyncio.Semaphore, made in the loop
        self.metrics = metrics()

    async def enter(self):
        """Wait for a place; `TooBusy` when none is free and the line is
        full. Returns the seconds waited."""
        if self._free is None:
            self._free = asyncio.Semaphore(self.running)
        if self._free.locked() and self.queued >= self.waiting:
            raise TooBusy(
                f"{self.name} is decoding {self.decoding} answers, its limit "
                f"(--max-streams), and {self.queued} more wait, the line's "
                "length (--max-queue); retry after a second."
            )
        start = time.monotonic()
        self.queued += 1
        self.metrics["waiting"].labels(self.name).inc()
        try:
            await self._free.acquire()
        finally:
            self.queued -= 1
            self.metrics["waiting"].labels(self.name).dec()
        waited = time.monotonic() - start
        self.decoding += 1
        self.metrics["running"].labels(self.name).inc()
        self.metrics["queue"].labels(self.name).observe(waited)
        return waited

    def leave(self):
        """Free the place `enter` took."""
        self.decoding -= 1
        self.metrics["running"].labels(self.name).dec()
        self._free.release()

    def timed(self, pieces, arrived):
        """`pieces` (an async iterator), its first piece's time since
        `arrived` (`time.monotonic()`) and each next one's gap recorded."""
        ttft = self.metrics["ttft"].labels(self.name)
        itl = self.metrics["itl"].labels(self.name)

        async def timed():
            last = None
            async for piece in pieces:
                now = time.monotonic()
                if last is None:
                    ttft.observe(now - arrived)
                else:
                    itl.observe(now - last)
                last = now
                yield piece

        return timed()
