"""Connection limits of `keras-attn serve`'s HTTP port: a connection
must send a request's headers within `--header-timeout` seconds of
opening (or of its request's first byte), and at most
`--max-connections` are open at once; one more is closed as soon as it
is accepted. Each connection closed by a limit is counted on the
Prometheus metrics route (`keras_attn_connections_closed_total`, by
reason) and logged in one WARNING line.

The rule lives in uvicorn's HTTP protocol (the server KServe runs), the
one place that sees a connection before it sends a request: a
subclass arms a timer where a request begins and disarms it once its
headers are read.
"""

from keras_attn_cli.serving.limits import LOGGER

CLOSED = None  # the Prometheus counter, made on first use


def closed_counter():
    """`keras_attn_connections_closed_total{reason}` on the default
    Prometheus registry (the one KServe's `/metrics` reads)."""
    global CLOSED
    if CLOSED is None:
        from prometheus_client import Counter

        CLOSED = Counter(
            "keras_attn_connections_closed",
            "HTTP connections closed by a limit of keras-attn serve",
            ["reason"],
        )
    return CLOSED


def _no_delay(transport):
    """Send each write at once (`TCP_NODELAY`): otherwise a response's
    second write (a body after its headers, a stream's next event) waits
    for the client's delayed acknowledgement, 40 ms on Linux, on every
    request of a kept-alive connection but the first."""
    import socket

    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def limited_protocol(header_timeout, max_connections, base=None):
    """uvicorn's HTTP protocol class (httptools') with the two limits: a
    connection that has not sent a request's headers `header_timeout`
    seconds after it opened (or after its request's first byte) is
    closed; so is one accepted while `max_connections` are open."""
    if base is None:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        base = HttpToolsProtocol
    counter = closed_counter()

    class LimitedProtocol(base):
        _header_timer = None

        def connection_made(self, transport):
            super().connection_made(transport)
            _no_delay(transport)
            if len(self.connections) > max_connections:
                self._close(
                    "max_connections",
                    f"{len(self.connections) - 1} connections open, the "
                    f"limit (--max-connections {max_connections})",
                )
                return
            self._arm()

        def on_message_begin(self):
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self):
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc):
            self._disarm()
            super().connection_lost(exc)

        def _arm(self):
            self._disarm()
            self._header_timer = self.loop.call_later(
                header_timeout, self._timed_out
            )

        def _disarm(self):
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _timed_out(self):
            self._header_timer = None
            self._close(
                "header_timeout",
                f"no request headers within {header_timeout:g} s "
                "(--header-timeout)",
            )

        def _close(self, reason, why):
            if self.transport.is_closing():
                return
            counter.labels(reason).inc()
            client = "{}:{}".format(*self.client) if self.client else "a client"
            LOGGER.warning("closed the connection of %s: %s", client, why)
            self.transport.close()

    return LimitedProtocol
