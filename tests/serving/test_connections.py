"""Connection limits on `keras-attn serve`'s HTTP port (`keras_attn_cli.
connections`), on a real uvicorn server in a thread: a connection that
sends nothing, or half a request's headers, is closed after the header
timeout; one past `--max-connections` is closed at once; each is
counted; a request sent in time is answered."""

import asyncio
import socket
import threading
import time

import pytest

uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("httptools")
pytest.importorskip("prometheus_client")


async def hello(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"hi"})


_servers = []  # the servers started here, to look into


def start(header_timeout, max_connections):
    """A uvicorn server in a thread with the limits; `(port, server)`."""
    from keras_attn_cli.serving.connections import limited_protocol

    # As `keras-attn serve` runs it: its own listening socket
    # (`socket.create_server`) on asyncio's loop.
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        hello,
        port=port,
        log_level="error",
        http=limited_protocol(header_timeout, max_connections),
        lifespan="off",
        loop="asyncio",
    )
    running = uvicorn.Server(config)
    _servers.append(running)
    threading.Thread(
        target=asyncio.run, args=(running.serve([sock]),), daemon=True
    ).start()
    while not running.started:
        time.sleep(0.02)
    return port, running


def _answer(sock):
    """One whole chunked answer, however many packets it came in."""
    answer = b""
    while not answer.endswith(b"0\r\n\r\n"):
        more = sock.recv(1024)
        assert more, answer  # closed before the answer was whole
        answer += more
    return answer


@pytest.fixture
def server():
    port, running = start(0.5, 3)
    yield port
    running.should_exit = True


@pytest.fixture
def patient_server():
    """A header timeout far longer than a closing at once takes."""
    port, running = start(30.0, 3)
    yield port
    running.should_exit = True


def closed_within(sock, seconds):
    """Whether the server closed `sock` within `seconds`."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1024) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def count(reason):
    from keras_attn_cli.serving.connections import closed_counter

    return closed_counter().labels(reason)._value.get()


def test_silent_and_half_sent_connections_are_closed_and_counted(server):
    before = count("header_timeout")
    silent = socket.create_connection(("127.0.0.1", server))
    half = socket.create_connection(("127.0.0.1", server))
    half.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # no blank line
    started = time.monotonic()
    # The close is the event waited for (up to 5 s each on a loaded
    # machine); it comes no sooner than the 0.5 s header timeout.
    assert closed_within(silent, 5) and closed_within(half, 5)
    assert time.monotonic() - started > 0.4
    assert count("header_timeout") == before + 2
    for sock in (silent, half):
        sock.close()


def test_a_request_in_time_is_answered_and_keeps_its_connection(server):
    sock = socket.create_connection(("127.0.0.1", server))
    sock.settimeout(5)
    for _ in range(2):  # two requests on one connection
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"200 OK" in _answer(sock)
    sock.close()


def test_a_connection_past_the_limit_is_closed_at_once(patient_server):
    before = count("max_connections")
    port = patient_server
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    time.sleep(0.1)
    extra = socket.create_connection(("127.0.0.1", port))
    assert closed_within(extra, 10)  # long before the header timeout
    assert count("max_connections") == before + 1
    for sock in (*held, extra):
        sock.close()


def test_every_write_of_a_kept_alive_connection_leaves_at_once(server):
    # Without TCP_NODELAY a response's second write waited for the
    # client's delayed acknowledgement: 40 ms on every request of a
    # kept-alive connection but the first (a stream's events as well).
    sock = socket.create_connection(("127.0.0.1", server))
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    sock.settimeout(5)
    assert b"200 OK" in _answer(sock)
    running = next(
        s for s in _servers if s.config.port == server
    )  # the server in this thread
    protocols = list(running.server_state.connections)
    assert protocols
    for protocol in protocols:
        accepted = protocol.transport.get_extra_info("socket")
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    sock.close()
