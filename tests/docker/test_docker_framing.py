"""The answer framing rules written by hand (h11's, RFC 9112 §6), and request heads as dockerd reads them."""

from __future__ import annotations

from runtimeproxy.docker.framing import (
    BodyFraming,
    answer_framing,
    body_end,
    chunk,
    framed,
    last_chunk,
    request_head,
    response_head,
)

JSON = (b"Content-Type", b"application/json")


def test_a_known_length_is_kept_and_the_connection_stays() -> None:
    headers, framing, keep = answer_framing(b"GET", 200, [JSON, (b"Content-Length", b"2")], True, True)
    assert (headers, framing, keep) == ([JSON, (b"Content-Length", b"2")], BodyFraming.LENGTH, True)
    assert framed(b"{}", framing) + body_end(framing) == b"{}"


def test_an_unknown_length_is_chunked_for_http11_and_ends_with_the_last_chunk() -> None:
    headers, framing, keep = answer_framing(b"GET", 200, [JSON], True, True)
    assert headers == [JSON, (b"Transfer-Encoding", b"chunked")] and keep
    assert framed(b"abc", framing) + framed(b"", framing) + body_end(framing) == b"3\r\nabc\r\n0\r\n\r\n"


def test_an_unknown_length_for_http10_is_delimited_by_closing() -> None:
    headers, framing, keep = answer_framing(b"GET", 200, [JSON], False, False)
    assert framing is BodyFraming.UNTIL_CLOSE and not keep
    assert headers == [JSON, (b"Connection", b"close")]


def test_head_204_and_304_have_no_body() -> None:
    assert answer_framing(b"HEAD", 200, [JSON], True, True)[1] is BodyFraming.NONE
    for status in (204, 304):
        headers, framing, _ = answer_framing(b"GET", status, [JSON], True, True)
        assert framing is BodyFraming.NONE and headers == [JSON]
    assert framed(b"ignored", BodyFraming.NONE) == b""


def test_a_closing_connection_says_so() -> None:
    headers, _, keep = answer_framing(b"GET", 200, [(b"Content-Length", b"0")], True, False)
    assert not keep and (b"Connection", b"close") in headers


def test_heads_and_chunks_on_the_wire() -> None:
    assert request_head(b"GET", b"/_ping", [(b"Host", b"")]) == b"GET /_ping HTTP/1.1\r\nHost: \r\n\r\n"
    assert response_head(200, b"OK", [JSON]) == b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"
    assert chunk(b"x" * 16) == b"10\r\n" + b"x" * 16 + b"\r\n"
    assert last_chunk([(b"X-Trailer", b"1")]) == b"0\r\nX-Trailer: 1\r\n\r\n"
