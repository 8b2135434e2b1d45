"""Plain requests read by llhttp: exactly what h11 reads from them, and everything else left to h11."""

from __future__ import annotations

import random

import h11
import pytest

from runtimeproxy.docker.incoming import PlainRequest, read_plain_request

MAX_HEAD = 1024 * 1024
INSPECT = b"GET /v1.41/containers/abc/json HTTP/1.1\r\nHost: \r\nUser-Agent: Go-http-client/1.1\r\n\r\n"
EXEC_START = (b"POST /v1.41/exec/abc/start HTTP/1.1\r\nHost: docker\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n"
              b"Content-Type: application/json\r\nContent-Length: 28\r\n\r\n{\"Detach\":false,\"Tty\":false}")
PIPELINED = b"GET /_ping?a=1&b=%20 HTTP/1.1\r\nHost: d\r\nX-Registry-Auth: eyJ0 \t\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\n"


def h11_reading(data: bytes) -> tuple[object, ...]:
    """What h11 reads from `data`: the request, its body, what follows, the client's state after it."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    conn.receive_data(data)
    try:
        request = conn.next_event()
        if not isinstance(request, h11.Request):
            return ("no request", request)
        body = b""
        while isinstance(event := conn.next_event(), h11.Data):
            body += event.data
        if not isinstance(event, h11.EndOfMessage):
            return ("incomplete", event)
    except h11.RemoteProtocolError as error:
        return ("refused", error.error_status_hint)
    return (request.method, request.target, list(request.headers.raw_items()), body, conn.trailing_data[0],
            conn.their_state)


def plain_reading(plain: PlainRequest) -> tuple[object, ...]:
    body = b""
    while isinstance(event := plain.next_event(), h11.Data):
        body += event.data
    assert isinstance(event, h11.EndOfMessage)
    request = plain.request
    return request.method, request.target, request.headers, body, plain.trailing_data[0], plain.their_state


@pytest.mark.parametrize("data", [INSPECT, EXEC_START, PIPELINED], ids=["inspect", "exec-start", "pipelined"])
def test_plain_requests_read_as_h11_reads_them(data: bytes) -> None:
    plain = read_plain_request(data, False, MAX_HEAD)
    assert plain is not None
    assert plain_reading(plain) == h11_reading(data)


@pytest.mark.parametrize("data", [
    INSPECT[:-2],  # the head has not all arrived
    EXEC_START[:-1],  # nor the body
    INSPECT.replace(b"HTTP/1.1", b"HTTP/1.0"),
    INSPECT.replace(b"Host: \r\n", b""),
    INSPECT.replace(b"Host: \r\n", b"Host: a\r\nHost: b\r\n"),
    INSPECT.replace(b"GET /", b"GET  /"),
    INSPECT.replace(b"\r\n", b"\n"),
    INSPECT.replace(b"Host: \r\n", b"Host: \r\n folded\r\n"),
    INSPECT.replace(b"Host: ", b"Host : "),
    INSPECT.replace(b"Host: ", b"Host: a\x01b"),
    INSPECT.replace(b"/json", b"/j\xc3\xa9son"),
    EXEC_START.replace(b"Content-Length: 28", b"Content-Length: 28\r\nContent-Length: 28"),
    EXEC_START.replace(b"Content-Length: 28", b"Content-Length: +28"),
    EXEC_START.replace(b"Content-Length: 28\r\n\r\n{\"Detach\":false,\"Tty\":false}",
                       b"Content-Length: 28\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    EXEC_START.replace(b"Content-Type", b"Expect: 100-continue\r\nContent-Type"),
    b"CONNECT d:80 HTTP/1.1\r\nHost: d\r\n\r\n",
], ids=["head-incomplete", "body-incomplete", "http-1.0", "no-host", "two-hosts", "double-space", "bare-lf",
        "obs-fold", "space-before-colon", "control-character", "non-ascii-target", "two-lengths", "signed-length",
        "length-and-chunked", "expect", "connect"])
def test_everything_else_is_left_to_h11(data: bytes) -> None:
    assert read_plain_request(data, False, MAX_HEAD) is None


def test_a_head_over_the_limit_is_left_to_h11_for_its_431() -> None:
    assert read_plain_request(INSPECT, False, len(INSPECT) - 1) is None


def test_data_after_the_request_and_the_clients_eof_are_kept_for_the_next_cycle() -> None:
    plain = read_plain_request(INSPECT + b"GET", True, MAX_HEAD)
    assert plain is not None
    plain.receive_data(b" /")
    assert plain.trailing_data == (b"GET /", True)


def test_mutated_requests_read_plain_only_when_h11_reads_them_the_same() -> None:
    """A differential check over mutations of real requests (a fixed seed: the same cases every run)."""
    pieces = [b" ", b"\t", b"\r", b"\n", b"\r\n", b":", b"\x00", b"\x7f", b"\x80", b",", b"a", b"0", b"/", b"?", b"%",
              b"Host: x\r\n", b"Content-Length: 3\r\n", b"Content-Length: 3 \r\n", b"Transfer-Encoding: chunked\r\n",
              b"Upgrade: tcp\r\n", b"Upgrade: ,\r\n", b"Connection: close\r\n", b"Expect: 100-continue\r\n",
              b"HTTP/1.0", b"CONNECT ", b"X : v\r\n", b"\r\n\r\n"]
    rng = random.Random(22)
    plain_count = 0
    for _ in range(3000):
        data = bytearray(rng.choice([INSPECT, EXEC_START, PIPELINED]))
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(data) + 1)
            if rng.random() < 0.5:
                data[at:at] = rng.choice(pieces)
            else:
                del data[at:at + rng.randint(1, 3)]
        plain = read_plain_request(bytes(data), False, MAX_HEAD)
        if plain is not None:
            plain_count += 1
            assert plain_reading(plain) == h11_reading(bytes(data)), bytes(data)
    assert plain_count > 300  # the check covered many plain requests, not only refusals
