"""Following the URLs Exec, Attach and PortForward return: a minimal client of containerd's streaming server.

containerd serves those sessions itself (Kubernetes' streaming server code) on the URL the CRI call answers,
over SPDY or websocket; the kubelet connects there, never through the CRI socket. This speaks just enough
websocket (RFC 6455, client side) with the ``v4.channel.k8s.io`` subprotocol to run a short exec, open an
attach and push bytes through a port forward, so the lab can prove a URL relayed by the proxy is live and
behaves like one obtained directly. Each message carries its channel number in its first byte (exec/attach:
0 stdin, 1 stdout, 2 stderr, 3 status; port forward: 0 data, 1 error, each opened by a 2-byte port number).
"""

from __future__ import annotations

import base64
import os
import socket
import struct
from dataclasses import dataclass, field
from urllib.parse import urlsplit

CHANNEL_PROTOCOL = "v4.channel.k8s.io"
OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x1, 0x2, 0x8, 0x9, 0xA
DEFAULT_TIMEOUT_SECONDS = 20.0


class StreamingError(RuntimeError):
    """The streaming server broke the websocket protocol (not: refused the session; that is an answer)."""


@dataclass
class Handshake:
    """What the streaming server answered to the upgrade request."""

    status: int
    reason: str
    headers: dict[str, str]  # lower-cased names
    body: bytes = b""  # when it refused the upgrade


@dataclass
class Session:
    """A websocket session: its handshake, then every message received, by channel, until the server closed."""

    handshake: Handshake
    channels: dict[int, bytes] = field(default_factory=dict)
    messages: int = 0


class WebSocket:
    """One client websocket connection to ``url`` (http://host:port/path?query)."""

    def __init__(self, url: str, protocol: str = CHANNEL_PROTOCOL, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            raise StreamingError(f"not a plain http streaming URL: {url}")
        self._sock = socket.create_connection((parts.hostname, parts.port or 80), timeout=timeout)
        self._buffer = b""
        key = base64.b64encode(os.urandom(16)).decode()
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        request = (f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {protocol}\r\n"
                   f"Origin: http://{parts.netloc}\r\n\r\n")
        self._sock.sendall(request.encode())
        self.handshake = self._read_handshake()

    def _read_until(self, marker: bytes) -> bytes:
        while marker not in self._buffer:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise StreamingError(f"connection closed before {marker!r}")
            self._buffer += chunk
        head, self._buffer = self._buffer.split(marker, 1)
        return head

    def _read_exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise StreamingError("connection closed inside a frame")
            self._buffer += chunk
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def _read_handshake(self) -> Handshake:
        status_line, *header_lines = self._read_until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        _, status, reason = (status_line.split(" ", 2) + [""])[:3]
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        handshake = Handshake(int(status), reason, headers)
        if handshake.status != 101:  # refused: the body says why (bounded by Content-Length or the close)
            length = int(headers.get("content-length", "0") or 0)
            handshake.body = self._read_exactly(length) if length else b""
        return handshake

    def receive(self) -> tuple[int, bytes] | None:
        """The next whole message (opcode, payload); None once the server sent close. Pings are answered."""
        while True:
            first, second = self._read_exactly(2)
            opcode, length = first & 0x0F, second & 0x7F
            if length == 126:
                (length,) = struct.unpack("!H", self._read_exactly(2))
            elif length == 127:
                (length,) = struct.unpack("!Q", self._read_exactly(8))
            mask = self._read_exactly(4) if second & 0x80 else b""
            payload = self._read_exactly(length)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if not first & 0x80:
                raise StreamingError("fragmented messages are not expected from the streaming server")
            if opcode == OP_CLOSE:
                return None
            if opcode == OP_PING:
                self.send(payload, OP_PONG)
                continue
            return opcode, payload

    def send(self, payload: bytes, opcode: int = OP_BINARY) -> None:
        """One masked client frame (clients must mask)."""
        mask = os.urandom(4)
        header = bytes([0x80 | opcode])
        if len(payload) < 126:
            header += bytes([0x80 | len(payload)])
        elif len(payload) < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack("!H", len(payload))
        else:
            header += bytes([0x80 | 127]) + struct.pack("!Q", len(payload))
        self._sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def close(self) -> None:
        try:
            self.send(struct.pack("!H", 1000), OP_CLOSE)
        except OSError:
            pass
        self._sock.close()

    def __enter__(self) -> WebSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _drain(ws: WebSocket, session: Session, stop_after: int | None = None) -> Session:
    """Messages into ``session.channels`` until the server closes (or ``stop_after`` non-empty messages)."""
    while (received := ws.receive()) is not None:
        _, payload = received
        if not payload:
            continue
        channel, data = payload[0], payload[1:]
        session.channels[channel] = session.channels.get(channel, b"") + data
        session.messages += 1
        if stop_after is not None and session.messages >= stop_after:
            break
    return session


def run_exec(url: str) -> Session:
    """Connect to an Exec URL and read everything the command writes until the server closes
    (the command must not wait for stdin)."""
    with WebSocket(url) as ws:
        session = Session(ws.handshake)
        return _drain(ws, session) if ws.handshake.status == 101 else session


def open_attach(url: str) -> Session:
    """Connect to an Attach URL and leave at once: the handshake shows whether the session was granted."""
    with WebSocket(url) as ws:
        return Session(ws.handshake)


def port_forward_once(url: str, port: int, data: bytes, reply_size: int) -> Session:
    """Forward ``data`` to ``port`` through a PortForward URL and read ``reply_size`` bytes back
    (channel 0: data; channel 1: errors). The port-number prefixes each channel opens with are dropped."""
    with WebSocket(f"{url}?port={port}") as ws:
        session = Session(ws.handshake)
        if ws.handshake.status != 101:
            return session
        ws.send(b"\x00" + data)
        while len(session.channels.get(0, b"")) < 2 + reply_size and (received := ws.receive()) is not None:
            _, payload = received
            if payload:
                session.channels[payload[0]] = session.channels.get(payload[0], b"") + payload[1:]
                session.messages += 1
        for channel, stream in session.channels.items():
            session.channels[channel] = stream[2:]  # the port number, little-endian
        return session
