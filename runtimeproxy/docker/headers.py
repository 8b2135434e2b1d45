"""Which HTTP headers cross the proxy (RFC 9110 §7.6.1), and how a relayed message is framed.

Hop-by-hop headers describe one connection, so they are dropped, together with every header the
`Connection` header names; an upgrade keeps `Connection: Upgrade` and `Upgrade`, as Go's ReverseProxy
does. Framing is re-decided per hop (`framing`): we only say "chunked" or keep `Content-Length`. Framing
headers are never dropped because `Connection` names them (the body would lose its length), and a
forwarded message has exactly one: with both, `Transfer-Encoding` wins (RFC 9112 §6.3) and
`Content-Length` is removed, which is also how dockerd (Go's net/http) reads such a request.
"""

from __future__ import annotations

from collections.abc import Iterable

Header = tuple[bytes, bytes]

HOP_BY_HOP_HEADERS = frozenset({
    b"connection", b"proxy-connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization",
    b"te", b"trailer", b"transfer-encoding", b"upgrade",
})
# Never dropped for being named in `Connection`: the message's length depends on them.
FRAMING_HEADERS = frozenset({b"content-length", b"transfer-encoding"})
RAW_STREAM_TYPES = (b"application/vnd.docker.raw-stream", b"application/vnd.docker.multiplexed-stream")


def _plain(headers: list[Header]) -> bool:
    """No hop-by-hop header at all (then none is named by `Connection` either, as that is one)."""
    return HOP_BY_HOP_HEADERS.isdisjoint([name.lower() for name, _ in headers])


def header_value(headers: Iterable[Header], name: bytes) -> bytes | None:
    """The first value of header `name` (lowercase), or None."""
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def _tokens(headers: Iterable[Header], name: bytes) -> set[bytes]:
    return {
        token.strip().lower()
        for key, value in headers if key.lower() == name
        for token in value.split(b",") if token.strip()
    }


def asks_upgrade(headers: Iterable[Header]) -> bool:
    """`Connection: Upgrade` plus an `Upgrade` protocol (Docker's exec start and attach use `tcp`)."""
    headers = list(headers)
    return b"upgrade" in _tokens(headers, b"connection") and bool(header_value(headers, b"upgrade"))


def is_chunked(headers: Iterable[Header]) -> bool:
    return b"chunked" in _tokens(headers, b"transfer-encoding")


def end_to_end(headers: Iterable[Header]) -> list[Header]:
    """`headers` without hop-by-hop ones, names and order as received."""
    headers = list(headers)
    named = _tokens(headers, b"connection") - FRAMING_HEADERS
    return [(key, value) for key, value in headers
            if key.lower() not in HOP_BY_HOP_HEADERS and key.lower() not in named]


def upgrade_headers(headers: Iterable[Header]) -> list[Header]:
    """What an upgrade needs to keep across the hop: `Connection: Upgrade` and the `Upgrade` value."""
    protocol = header_value(headers, b"upgrade")
    return [(b"Connection", b"Upgrade"), (b"Upgrade", protocol or b"tcp")]


def forwarded_request_headers(headers: Iterable[Header], body_length: int | None = None) -> list[Header]:
    """Request headers for dockerd; `body_length` set when the body was replaced (hooked routes)."""
    headers = list(headers)
    if body_length is None and _plain(headers) and header_value(headers, b"host") is not None:
        return headers  # most requests: nothing to drop or add
    kept = end_to_end(headers)
    if header_value(kept, b"host") is None:
        kept.insert(0, (b"Host", b""))  # HTTP/1.0 clients may omit it; dockerd's HTTP/1.1 needs one
    if body_length is not None or is_chunked(headers):
        kept = [(k, v) for k, v in kept if k.lower() != b"content-length"]
    if body_length is not None:
        kept.append((b"Content-Length", str(body_length).encode()))
    elif is_chunked(headers):
        kept.append((b"Transfer-Encoding", b"chunked"))
    if asks_upgrade(headers):
        kept += upgrade_headers(headers)
    return kept


def forwarded_response_headers(headers: Iterable[Header], status: int) -> list[Header]:
    """Response headers for the client. Without Content-Length, `framing` frames the body for the client
    (chunked for HTTP/1.1, close-delimited for HTTP/1.0)."""
    headers = list(headers)
    names = [name.lower() for name, _ in headers]
    if status != 101 and b"connection" not in names:  # most answers: at most a framing header to drop
        if HOP_BY_HOP_HEADERS.isdisjoint(names):
            return headers
        drop = HOP_BY_HOP_HEADERS | {b"content-length"} if is_chunked(headers) else HOP_BY_HOP_HEADERS
        return [header for header, name in zip(headers, names) if name not in drop]
    kept = end_to_end(headers)
    if is_chunked(headers):  # llhttp read it chunked; a Content-Length beside that is no length at all
        kept = [(k, v) for k, v in kept if k.lower() != b"content-length"]
    if status == 101:
        kept += upgrade_headers(headers)
    return kept


def is_raw_stream_answer(status: int, headers: Iterable[Header]) -> bool:
    """dockerd's answer to a hijack without Upgrade: `200`, a raw-stream type, no framing at all."""
    headers = list(headers)
    content_type = (header_value(headers, b"content-type") or b"").split(b";")[0].strip().lower()
    return (status == 200 and content_type in RAW_STREAM_TYPES and not is_chunked(headers)
            and header_value(headers, b"content-length") is None)
