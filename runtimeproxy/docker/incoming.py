"""The client's requests as the relay reads them: plain ones whole by llhttp, every other one by h11.

h11 is the authority on what a client may send (its checks decide the malformed-request answers: 400,
431, its framing rules), but it costs ~20 µs a request in Python. Most requests are plain: a head that
arrived whole, HTTP/1.1 (not CONNECT), exactly one `Host`, no `Transfer-Encoding` or `Expect`, at most one
`Content-Length` whose body arrived with the head. Such a request is read by llhttp (`httptools`, C, strict
mode) in ~2 µs, after checks that leave nothing h11 would refuse: no control characters or bare CR/LF in
the head, no folded line, an ASCII target, every header name a token and value clean (llhttp's strict
mode). Anything else, or anything llhttp refuses, goes to h11 from the first byte of the request, so its
answers and its streaming of bodies are exactly as before.

`PlainRequest` stands in for h11's connection for its exchange: the same events (`Data`, `EndOfMessage`),
states and `trailing_data` the relay uses.
"""

from __future__ import annotations

import collections

import h11
import httptools

from runtimeproxy.docker.headers import Header

# Control characters but HTAB, CR and LF: none in a plain head (nor a CR or LF outside a CRLF: h11 accepts
# bare LF line ends; nor a line that starts with whitespace: obs-fold, which h11 refuses).
_CONTROL_BYTES = bytes([*range(0x00, 0x09), 0x0b, 0x0c, *range(0x0e, 0x20), 0x7f])
_HEAD_END = b"\r\n\r\n"
# Headers whose rules h11 applies (chunked bodies, 100-continue): such requests go to it.
_H11_HEADERS = frozenset({b"transfer-encoding", b"expect"})
_OWS = b" \t"


class ClientRequest:
    """A request head: method, target, headers (names and order as received, values without surrounding
    whitespace) and HTTP version (b"1.1", b"1.0")."""

    __slots__ = ("method", "target", "headers", "http_version")

    def __init__(self, method: bytes, target: bytes, headers: list[Header], http_version: bytes) -> None:
        self.method = method
        self.target = target
        self.headers = headers
        self.http_version = http_version

    @classmethod
    def from_h11(cls, request: h11.Request) -> ClientRequest:
        return cls(request.method, request.target, list(request.headers.raw_items()), request.http_version)


class _Head:
    """llhttp's callbacks for one request head; the headers that decide whether it is plain, counted."""

    __slots__ = ("target", "headers", "complete", "hosts", "lengths", "length", "for_h11", "upgrade", "connection")

    def __init__(self) -> None:
        self.target = b""
        self.headers: list[Header] = []
        self.complete = False
        self.hosts = self.lengths = 0
        self.length = b"0"
        self.for_h11 = False  # one of _H11_HEADERS
        self.upgrade: list[bytes] = []
        self.connection: list[bytes] = []

    def on_url(self, url: bytes) -> None:
        self.target += url

    def on_header(self, name: bytes, value: bytes) -> None:
        value = value.rstrip(_OWS)  # llhttp keeps trailing whitespace; h11 drops it
        self.headers.append((name, value))
        lowered = name.lower()
        if lowered == b"host":
            self.hosts += 1
        elif lowered == b"content-length":
            self.lengths += 1
            self.length = value
        elif lowered in _H11_HEADERS:
            self.for_h11 = True
        elif lowered == b"upgrade":
            self.upgrade.append(value)
        elif lowered == b"connection":
            self.connection.append(value)

    def on_headers_complete(self) -> None:
        self.complete = True


class PlainRequest:
    """A plain request read whole: its events, then what the client sent after it."""

    their_http_version = b"1.1"
    they_are_waiting_for_100_continue = False

    def __init__(self, request: ClientRequest, body: bytes, rest: bytes, closed: bool, read_state: object) -> None:
        """`read_state`: h11's state for the client once the request is read (`_state_after`)."""
        self.request = request
        self._read_state = read_state
        self._events: collections.deque[h11.Data | h11.EndOfMessage] = collections.deque()
        if body:
            self._events.append(h11.Data(data=body))
        self._events.append(h11.EndOfMessage())
        self._rest = rest
        self._closed = closed

    @property
    def their_state(self) -> object:
        return h11.SEND_BODY if self._events else self._read_state

    def next_event(self) -> h11.Data | h11.EndOfMessage | type[h11.PAUSED]:
        return self._events.popleft() if self._events else h11.PAUSED  # as h11: the next request waits

    def receive_data(self, data: bytes) -> None:
        if data:
            self._rest += data
        else:
            self._closed = True

    @property
    def trailing_data(self) -> tuple[bytes, bool]:
        return self._rest, self._closed


def read_plain_request(data: bytes, closed: bool, max_head_bytes: int) -> PlainRequest | None:
    """The request at the start of `data` if it is plain and whole (`closed`: the client's EOF follows
    `data`); None means h11 reads it."""
    end = data.find(_HEAD_END)
    if end < 0 or end + len(_HEAD_END) > max_head_bytes:
        return None
    head_end = end + len(_HEAD_END)
    if not _clean(data[:end]):
        return None
    head = _Head()
    parser = httptools.HttpRequestParser(head)
    try:
        parser.feed_data(data[:head_end])
    except httptools.HttpParserUpgrade:
        pass  # `Connection: upgrade` and `Upgrade` (told apart below), or CONNECT
    except httptools.HttpParserError:
        return None
    method = parser.get_method()
    if not head.complete or parser.get_http_version() != "1.1" or not head.target.isascii() or method == b"CONNECT":
        return None
    if not data.startswith(b"%s %s HTTP/1.1\r\n" % (method, head.target)):
        return None  # llhttp lets more than one space separate the parts of the request line; h11 does not
    # Plain headers: one Host, at most one Content-Length (digits), none of _H11_HEADERS.
    if head.hosts != 1 or head.lengths > 1 or head.for_h11 or not head.length.isdigit():
        return None
    body_end = head_end + int(head.length)
    if len(data) < body_end:
        return None
    request = ClientRequest(method, head.target, head.headers, b"1.1")
    return PlainRequest(request, data[head_end:body_end], data[body_end:], closed, _state_after(head))


def _clean(head: bytes) -> bool:
    """No control character but HTAB, every CR and LF in a CRLF, no line starting with whitespace."""
    if len(head.translate(None, _CONTROL_BYTES)) != len(head):
        return False
    line_ends = head.count(b"\r\n")
    return (head.count(b"\r") == line_ends and head.count(b"\n") == line_ends
            and b"\n " not in head and b"\n\t" not in head)


def _tokens(values: list[bytes]) -> list[bytes]:
    return [token for value in values for token in (part.strip().lower() for part in value.split(b",")) if token]


def _state_after(head: _Head) -> object:
    """h11's state for the client once the request is read: an `Upgrade` header with a protocol in it
    proposes a switch (decided by the answer); else `Connection: close` ends the connection after it."""
    if head.upgrade and _tokens(head.upgrade):
        return h11.MIGHT_SWITCH_PROTOCOL
    return h11.MUST_CLOSE if head.connection and b"close" in _tokens(head.connection) else h11.DONE
