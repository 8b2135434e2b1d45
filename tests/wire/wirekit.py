"""Compiling tests/wire/independent_hooks.proto and running independent_plugin.py as a process.

Imports nothing of runtimeproxy, so tests/e2e/test_wire_plugin.py can load it by path too.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # also when loaded by file path from tests/e2e
    sys.path.insert(0, str(HERE))
from independent_plugin import ANNOTATION, numbered as _plugin_numbered  # noqa: E402  (stdlib only)
PROTO = HERE / "independent_hooks.proto"
SCRIPT = HERE / "independent_plugin.py"


def compile_proto(out: Path, descriptor_set: Path | None = None) -> Path:
    """Generate independent_hooks_pb2(_grpc).py into out (and a FileDescriptorSet, if asked)."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "grpc_tools.protoc", f"-I{HERE}", f"--python_out={out}",
            f"--grpc_python_out={out}"]
    if descriptor_set is not None:
        argv.append(f"--descriptor_set_out={descriptor_set}")
    argv.append(PROTO.name)
    result = subprocess.run(argv, cwd=HERE, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"protoc failed:\n{result.stdout}\n{result.stderr}"
    return out


def numbered(message: Any) -> dict[str, Any]:
    """independent_plugin.numbered for our own messages, compared after the same JSON round trip."""
    return json.loads(json.dumps(_plugin_numbered(message)))


class PluginProcess:
    def __init__(self, generated: Path, socket: Path, record: Path, *extra_args: str) -> None:
        self.generated = generated
        self.socket = socket
        self.record = record
        self.log = record.with_suffix(".log")
        self.extra_args = list(extra_args)
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> None:
        self.socket.unlink(missing_ok=True)
        argv = [sys.executable, str(SCRIPT), "--generated", str(self.generated), "--socket", str(self.socket),
                "--record", str(self.record), *self.extra_args]
        with open(self.log, "ab") as log:
            self._proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.generated)
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"independent plugin exited with {self._proc.returncode}:\n{self.log_text()}")
            if self.socket.exists():
                with grpc.insecure_channel(f"unix://{self.socket}") as channel:
                    try:
                        grpc.channel_ready_future(channel).result(timeout=1)
                        return
                    except grpc.FutureTimeoutError:
                        pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"independent plugin not serving after {timeout}s:\n{self.log_text()}")
            time.sleep(0.05)

    def stop(self) -> int:
        proc, self._proc = self._proc, None
        if proc is None:
            return 0
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        return proc.returncode

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"

    def records(self) -> list[dict[str, Any]]:
        try:
            text = self.record.read_text()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line]

    def records_for(self, hook: str) -> list[dict[str, Any]]:
        return [line for line in self.records() if line["hook"] == hook]

    def forget(self) -> None:
        self.record.unlink(missing_ok=True)
