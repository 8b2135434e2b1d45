"""Hop-by-hop rules of the Docker relay (RFC 9110 §7.6.1)."""

from __future__ import annotations

from runtimeproxy.docker.headers import (
    asks_upgrade,
    end_to_end,
    forwarded_request_headers,
    forwarded_response_headers,
)


def test_connection_named_and_hop_by_hop_headers_are_dropped() -> None:
    headers = [(b"Host", b""), (b"Connection", b"close, X-Trace"), (b"X-Trace", b"1"), (b"TE", b"trailers"),
               (b"Proxy-Connection", b"keep-alive"), (b"X-Registry-Auth", b"e30=")]
    assert end_to_end(headers) == [(b"Host", b""), (b"X-Registry-Auth", b"e30=")]


def test_request_framing_follows_the_body() -> None:
    chunked = [(b"Host", b"d"), (b"Transfer-Encoding", b"chunked")]
    assert forwarded_request_headers(chunked) == [(b"Host", b"d"), (b"Transfer-Encoding", b"chunked")]
    assert forwarded_request_headers(chunked, body_length=7) == [(b"Host", b"d"), (b"Content-Length", b"7")]
    sized = [(b"Host", b""), (b"Content-Length", b"3")]
    assert forwarded_request_headers(sized, body_length=5) == [(b"Host", b""), (b"Content-Length", b"5")]


def test_a_missing_host_is_sent_empty() -> None:
    assert forwarded_request_headers([(b"Accept", b"*/*")]) == [(b"Host", b""), (b"Accept", b"*/*")]


def test_upgrade_keeps_connection_and_upgrade() -> None:
    request = [(b"Host", b""), (b"Connection", b"Upgrade"), (b"Upgrade", b"tcp")]
    assert asks_upgrade(request)
    assert forwarded_request_headers(request) == [(b"Host", b""), (b"Connection", b"Upgrade"), (b"Upgrade", b"tcp")]
    answer = [(b"Content-Type", b"application/vnd.docker.raw-stream"), (b"Connection", b"Upgrade"),
              (b"Upgrade", b"tcp")]
    assert forwarded_response_headers(answer, 101) == answer
    assert forwarded_response_headers(answer, 200) == answer[:1]
    assert not asks_upgrade([(b"Upgrade", b"tcp")])


def test_framing_headers_named_in_connection_are_kept() -> None:
    sized = [(b"Host", b""), (b"Connection", b"Content-Length, X-Trace"), (b"Content-Length", b"3"), (b"X-Trace", b"1")]
    assert forwarded_request_headers(sized) == [(b"Host", b""), (b"Content-Length", b"3")]
    chunked = [(b"Host", b""), (b"Connection", b"Transfer-Encoding"), (b"Transfer-Encoding", b"chunked")]
    assert forwarded_request_headers(chunked) == [(b"Host", b""), (b"Transfer-Encoding", b"chunked")]


def test_with_both_framing_headers_only_transfer_encoding_is_forwarded() -> None:
    both = [(b"Host", b""), (b"Content-Length", b"5"), (b"Transfer-Encoding", b"chunked")]
    assert forwarded_request_headers(both) == [(b"Host", b""), (b"Transfer-Encoding", b"chunked")]
    assert forwarded_request_headers(both, body_length=9) == [(b"Host", b""), (b"Content-Length", b"9")]
    answer = [(b"Content-Length", b"5"), (b"Transfer-Encoding", b"chunked"), (b"Content-Type", b"text/plain")]
    assert forwarded_response_headers(answer, 200) == [(b"Content-Type", b"text/plain")]
