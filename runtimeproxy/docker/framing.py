"""HTTP/1.1 message heads and body framing, written by hand for both hops of the Docker relay.

What is written was parsed and checked on the way in (h11 for the client's requests, llhttp for dockerd's
answers) and filtered by `headers`, so nothing is validated twice. The rules for an answer to the client
are h11's (RFC 9112 §6): no body after HEAD, 204 or 304; a known length is kept; an unknown one is chunked
for an HTTP/1.1 client and delimited by closing the connection for an HTTP/1.0 one; `Connection: close`
whenever the connection ends after the answer.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from runtimeproxy.docker.headers import Header

LAST_CHUNK = b"0\r\n\r\n"


class BodyFraming(enum.Enum):
    NONE = "none"  # no body at all (HEAD, 204, 304)
    LENGTH = "length"  # Content-Length: the bytes as they are
    CHUNKED = "chunked"
    UNTIL_CLOSE = "until-close"  # an HTTP/1.0 client without a length: the end is the connection's close


def _lines(headers: Iterable[Header]) -> list[bytes]:
    return [b"%s: %s\r\n" % header for header in headers]


def request_head(method: bytes, target: bytes, headers: Iterable[Header]) -> bytes:
    return b"%s %s HTTP/1.1\r\n%s\r\n" % (method, target, b"".join(_lines(headers)))


def response_head(status: int, reason: bytes, headers: Iterable[Header]) -> bytes:
    return b"HTTP/1.1 %d %s\r\n%s\r\n" % (status, reason, b"".join(_lines(headers)))


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def last_chunk(trailers: Iterable[Header] = ()) -> bytes:
    return b"0\r\n%s\r\n" % b"".join(_lines(trailers))


def framing_of_request(headers: Iterable[Header]) -> bool:
    """Whether a forwarded request's body is chunked (`headers.forwarded_request_headers` leaves exactly one
    framing header, `Transfer-Encoding: chunked` or `Content-Length`, or none)."""
    return any(name == b"Transfer-Encoding" or name.lower() == b"transfer-encoding" for name, _ in headers)


def answer_framing(method: bytes, status: int, headers: list[Header], client_http11: bool,
                   keep_alive: bool) -> tuple[list[Header], BodyFraming, bool]:
    """The headers to send the client, how the body is framed, and whether the connection stays open."""
    if status in (204, 304):
        framing = BodyFraming.NONE
    elif any(name.lower() == b"content-length" for name, _ in headers):
        framing = BodyFraming.LENGTH
    elif client_http11:
        headers = [*headers, (b"Transfer-Encoding", b"chunked")]  # as for GET, even after HEAD (h11's rule)
        framing = BodyFraming.CHUNKED
    else:
        framing = BodyFraming.UNTIL_CLOSE
        keep_alive = keep_alive and method == b"HEAD"
    if method == b"HEAD":
        framing = BodyFraming.NONE
    if not keep_alive:
        headers = [*headers, (b"Connection", b"close")]
    return headers, framing, keep_alive


def framed(data: bytes, framing: BodyFraming) -> bytes:
    """A piece of the body as it goes on the wire."""
    if framing is BodyFraming.CHUNKED:
        return chunk(data) if data else b""
    return b"" if framing is BodyFraming.NONE else data


def body_end(framing: BodyFraming) -> bytes:
    return LAST_CHUNK if framing is BodyFraming.CHUNKED else b""
