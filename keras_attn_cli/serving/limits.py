"""The request limits of `keras-attn serve`, one set for every protocol
(TensorFlow Serving's REST and gRPC, KServe v2's, OpenAI's): their
defaults (the flags `--max-body-bytes`, `--max-instances`,
`--max-text-bytes`, `--max-streams`, `--header-timeout`,
`--max-connections`), the checks, the error a refused
request gets, and the one log line it leaves (`log_refusal`)."""

import logging

# The server's own logger (`--log-level` sets it with KServe's).
LOGGER = logging.getLogger("keras_attn.serve")

LIMITS = {
    "max_body_bytes": 1 << 20,
    "max_instances": 256,
    "max_text_bytes": 100_000,
    # Streams decoding at once for one model (OpenAI's routes): one more
    # is a 429 with `Retry-After`, not a queue without bound. `None`:
    # what the model's decode loops hold at once (`stream_limit`).
    "max_streams": None,
    # Requests that wait for a place to decode, a model; one more is a
    # 429 with `Retry-After` (`admission`).
    "max_queue": 64,
    # Connections (HTTP; gRPC's handshake): seconds to send a request's
    # headers, and how many may be open at once (`connections`).
    "header_timeout": 10.0,
    "max_connections": 1000,
}

# `max_streams` of a model that does not say what it holds at once.
DEFAULT_STREAMS = 8


class RequestError(ValueError):
    """A request that cannot be served; its message says why (a 400, or
    gRPC's INVALID_ARGUMENT)."""


def check_count(count, limits):
    """A `RequestError` for more examples in one request than
    `max_instances`."""
    if count > limits["max_instances"]:
        raise RequestError(
            f"Too many examples in one request: at most "
            f"{limits['max_instances']}. Received: {count}"
        )


def check_text(data, where, limits):
    """A `RequestError` naming `where` for a text (UTF-8 bytes) longer
    than `max_text_bytes`."""
    if len(data) > limits["max_text_bytes"]:
        raise RequestError(
            f"Text too long in {where}: at most {limits['max_text_bytes']} "
            f"bytes. Received: {len(data)} bytes"
        )


def stream_limit(limits, capacity):
    """The streams one model decodes at once: `max_streams`, or where it
    is `None` the texts the model's decode loops hold at once
    (`capacity`, as its capabilities say), else `DEFAULT_STREAMS`."""
    if limits["max_streams"] is not None:
        return limits["max_streams"]
    return capacity or DEFAULT_STREAMS


def log_refusal(status, route, err):
    """One WARNING line for a client's refused call: its status (a number
    or a gRPC code's name), the route or method, and the message on one
    line, cut at 300 characters; never a traceback."""
    message = " ".join(str(err).split())
    LOGGER.warning("%s %s: %s", status, route, message[:300])
