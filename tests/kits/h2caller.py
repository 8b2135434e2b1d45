"""A gRPC caller in raw HTTP/2 frames, for what a gRPC client hides: which frames the server sent, in which order,
and when its first one (the server preface, SETTINGS) came. h2 only encodes the caller's side."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import h2.config
import h2.connection

from runtimeproxy.cri import h2frames as wire

# The kubelet's CRI client (k8s.io/cri-client, remote_runtime.go and remote_image.go: minConnectionTimeout, grpc-go's
# MinConnectTimeout): a new connection without the server's SETTINGS by then is closed and its calls fail UNAVAILABLE.
KUBELET_HANDSHAKE_DEADLINE_SECONDS = 5.0
Frame = tuple[int, int, int]  # (type, flags, stream id)


class RawCaller:
    """One connection to a unix socket; what the server sends is kept, frame by frame."""

    def __init__(self, path: Path, timeout: float = 10.0) -> None:
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.connected = time.monotonic()
        self.received = bytearray()

    def close(self) -> None:
        self.sock.close()

    def handshake(self, deadline_seconds: float = KUBELET_HANDSHAKE_DEADLINE_SECONDS) -> float | None:
        """grpc-go's dial: seconds from connect to the server's SETTINGS, or None if none came by the deadline
        (where grpc-go closes the connection: "error reading server preface")."""
        end = self.connected + deadline_seconds
        while not self.frames():
            self.sock.settimeout(max(0.001, end - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return None
            if not chunk:
                return None
            self.received += chunk
        if self.frames()[0] != (wire.SETTINGS, 0, 0):
            return None
        return time.monotonic() - self.connected

    def call(self, stream_id: int, method: str, message: bytes) -> None:
        """Send a unary call (the connection preface before the first)."""
        self.conn.send_headers(stream_id, [(":method", "POST"), (":scheme", "http"), (":path", method),
                                           (":authority", "x"), ("content-type", "application/grpc"),
                                           ("te", "trailers")])
        self.conn.send_data(stream_id, b"\x00" + len(message).to_bytes(4, "big") + message, end_stream=True)
        self.sock.sendall(self.conn.data_to_send())

    def frames(self) -> list[Frame]:
        return [(kind, flags, stream) for kind, flags, stream, *_ in wire.frames(self.received, wire.MAX_FRAME_PAYLOAD)]

    def read_until(self, frame: Frame, timeout: float = 10.0) -> None:
        """Until `frame` (type, flags the frame must have, stream) came; fails if the connection closes first."""
        self.sock.settimeout(timeout)
        while not any((kind, flags & frame[1], stream) == frame for kind, flags, stream in self.frames()):
            chunk = self.sock.recv(65536)
            assert chunk, f"closed after {self.frames()}"
            self.received += chunk

    def answer(self, stream_id: int) -> tuple[bytes, str | None]:
        """The message and grpc-status of a finished call, decoded from what was received."""
        blocks, message, status = wire.HeaderReader(wire.MAX_FRAME_PAYLOAD), b"", None
        for kind, flags, stream, start, end in wire.frames(self.received, wire.MAX_FRAME_PAYLOAD):
            whole = blocks.feed(kind, flags, stream, self.received, start, end) \
                if kind in (wire.HEADERS, wire.CONTINUATION) else None
            if stream != stream_id:
                continue
            if kind == wire.DATA:
                begin, stop = wire.unpadded(self.received, flags, start, end)
                message += bytes(self.received[begin:stop])
            status = next((value.decode() for name, value in whole[2] if name == b"grpc-status"), status) \
                if whole else status
        return message[5:], status

    def server_settings(self) -> list[Frame]:
        """The SETTINGS frames the server sent (not its acknowledgements of the caller's)."""
        return [frame for frame in self.frames() if frame[0] == wire.SETTINGS and not frame[1] & wire.ACK]
