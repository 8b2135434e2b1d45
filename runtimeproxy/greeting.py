"""The early greeting: while a socket-activated proxy starts, the callers waiting on its CRI socket get the HTTP/2
server preface at once, so that their handshake deadline does not run out before the frame relay serves.

gRPC clients give a new connection a deadline for the server's first frame, SETTINGS: grpc-go's MinConnectTimeout,
which the kubelet's CRI client (k8s.io/cri-client) sets to 5 s, then it closes the connection and every call on it
fails UNAVAILABLE ("error reading server preface"). Under socket activation the kubelet's connections wait in
systemd's backlog while the old process drains and the new one starts, which on a slow node takes longer than that.
So the command line (runtimeproxy.cli), before the heavy imports, hands the CRI socket systemd passed (taken and
checked as runtimeproxy.activation takes it) to a `Greeting`: a thread that accepts there and writes each
connection an empty SETTINGS frame, reading nothing. When the frame relay serves (cri.framefront), it takes the
greeted connections over (`handover`) and serves each alone, as it does a caller no backend is paired with; the
thread is over by then. A start that fails (or is stopped) closes them (`close`): their callers see EOF, as they
would have at their deadline.

The standard library and the small shared modules only (no asyncio, no gRPC): it runs while those are still being
imported.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import socket
import threading

from runtimeproxy.activation import InheritedSockets
from runtimeproxy.listener import SOCKET_MODE
from runtimeproxy.options import ProxyOptions

log = logging.getLogger(__name__)

# An empty SETTINGS frame (RFC 9113 §3.4, §6.5): length 0, type 4, no flags, stream 0.
SERVER_PREFACE = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
# Greeted connections kept at most (each an fd); past it, callers wait in the backlog as they would without greeting.
MAX_GREETED_CONNECTIONS = 256
# accept() errors after which the listening socket is still good (the caller left before we took it).
_CALLER_LEFT = frozenset({errno.ECONNABORTED, errno.EPROTO})


class Greeting:
    """Accepts on `listening` (a listening unix stream socket) in a thread of its own and greets every connection
    with SERVER_PREFACE, keeping it unread until `handover` or `close`."""

    def __init__(self, listening: socket.socket) -> None:
        self.listening = listening
        self._greeted: list[socket.socket] = []
        self._wake_read, self._wake_write = os.pipe()
        self._thread = threading.Thread(target=self._serve, name="early-greeting", daemon=True)
        self._stopped = False

    def start(self) -> None:
        self._thread.start()

    def _serve(self) -> None:
        poller = select.poll()
        poller.register(self._wake_read, select.POLLIN)
        poller.register(self.listening, select.POLLIN)
        while True:
            events = poller.poll()
            if any(fd == self._wake_read for fd, _ in events):
                return
            if not self._accept_waiting():
                poller.unregister(self.listening)  # full, or the socket failed: wait to be stopped

    def _accept_waiting(self) -> bool:
        """Greet every connection waiting; False once no more will be taken."""
        while len(self._greeted) < MAX_GREETED_CONNECTIONS:
            try:
                connection, _ = self.listening.accept()
            except (BlockingIOError, InterruptedError):
                return True
            except OSError as error:
                if error.errno in _CALLER_LEFT:
                    continue
                log.warning("early greeting: cannot accept on %s (%s); callers wait for the proxy to serve",
                            self.listening.getsockname(), error.strerror)
                return False
            try:
                connection.setblocking(False)
                connection.send(SERVER_PREFACE)  # 9 bytes into a new connection's empty buffer: never partial
            except OSError:  # the caller left already
                connection.close()
                continue
            self._greeted.append(connection)
        return False

    def _stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._thread.is_alive():
            os.write(self._wake_write, b"x")
            self._thread.join()
        os.close(self._wake_read)
        os.close(self._wake_write)

    def handover(self) -> list[socket.socket]:
        """Stop greeting; the connections greeted so far, each sent SERVER_PREFACE and nothing read, now the
        caller's (non-blocking)."""
        self._stop()
        greeted, self._greeted = self._greeted, []
        return greeted

    def close(self) -> None:
        """Stop greeting and close what was greeted and not handed over (their callers see EOF)."""
        for connection in self.handover():
            connection.close()


def greet_inherited(options: ProxyOptions, inherited: InheritedSockets) -> Greeting | None:
    """The socket systemd passed for the frame relay, taken (and checked: ActivationError) from `inherited` and
    greeted from now on; None where there is none (not socket-activated, Docker mode, --cri-frame-relay=false)."""
    if not options.uses_frame_relay:
        return None
    listening = inherited.take(options.listen_path, options.frontend_role, SOCKET_MODE)
    if listening is None:
        return None
    greeting = Greeting(listening)
    greeting.start()
    return greeting
