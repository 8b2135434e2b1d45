"""The proxy's own requests to dockerd (list and inspect containers, update, stop or remove one), over a fresh
connection each.

Used to fill the hook store: after a restart (list + inspect) and on a miss (inspect); and for NRI plugins:
updates of other containers (update), evictions (stop), undoing a sandbox a plugin failed (remove). Not on the relay's path: a client's requests never wait behind these.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from pathlib import Path
from typing import Any

from runtimeproxy.docker.upstream import Upstream

# One inspect or list answer; a node with thousands of containers lists a few MB. As large as the CRI
# answers the proxy relays (256 MiB): dockerd keeps whatever labels and env it was given (issue 17: a 50 MB
# label), and every container it lists must still be recorded after a restart.
MAX_ANSWER_BYTES = 256 * 1024 * 1024
REQUEST_TIMEOUT_SECONDS = 10.0


class EngineError(Exception):
    """dockerd could not be asked, or did not answer 2xx with JSON."""


class EngineClient:
    def __init__(self, docker_socket: Path) -> None:
        self._socket = docker_socket

    async def get_json(self, target: str, timeout: float = REQUEST_TIMEOUT_SECONDS) -> Any:
        """GET `target`; the decoded JSON answer. None for 404 (no such container)."""
        status, body = await self._call("GET", target, None, timeout)
        if status == 404:
            return None
        if not 200 <= status < 300:
            raise EngineError(f"GET {target}: dockerd answered {status}: {body[:200]!r}")
        try:
            return json.loads(body)
        except ValueError as error:
            raise EngineError(f"GET {target}: not JSON: {error}") from None

    async def post_json(self, target: str, body: Any, timeout: float = REQUEST_TIMEOUT_SECONDS) -> Any:
        """POST `body` as JSON to `target`; the decoded JSON answer (None when empty). Raises EngineError
        for anything but a 2xx (dockerd's message in it)."""
        status, answer = await self._call("POST", target, json.dumps(body).encode(), timeout)
        if not 200 <= status < 300:
            raise EngineError(f"POST {target}: dockerd answered {status}: {_message(answer)}")
        try:
            return json.loads(answer) if answer.strip() else None
        except ValueError as error:
            raise EngineError(f"POST {target}: not JSON: {error}") from None

    async def command(self, method: str, target: str, timeout: float = REQUEST_TIMEOUT_SECONDS) -> int:
        """A request without a body whose answer is only a status (stop, delete): the status; raises EngineError
        for anything but 2xx, 304 (already so) and 404 (no such container)."""
        body = b"" if method == "POST" else None  # Content-Length: 0
        status, answer = await self._call(method, target, body, timeout)
        if not (200 <= status < 300 or status in (304, 404)):
            raise EngineError(f"{method} {target}: dockerd answered {status}: {_message(answer)}")
        return status

    async def stop(self, container_id: str, timeout_seconds: int) -> None:
        """`POST /containers/{id}/stop?t=N`: dockerd sends the stop signal, then SIGKILL after N seconds."""
        await self.command("POST", f"{_container(container_id)}/stop?t={timeout_seconds}",
                           REQUEST_TIMEOUT_SECONDS + timeout_seconds)

    async def remove(self, container_id: str) -> None:
        """`DELETE /containers/{id}?force=1&v=1`: stopped if running, removed with its anonymous volumes."""
        await self.command("DELETE", f"{_container(container_id)}?force=1&v=1")

    async def _call(self, method: str, target: str, body: bytes | None, timeout: float) -> tuple[int, bytes]:
        """One exchange within `timeout`: dockerd's status and answer; EngineError when it cannot be had."""
        try:
            return await asyncio.wait_for(self._exchange(method, target, body), timeout)
        except (ConnectionError, TimeoutError) as error:
            raise EngineError(f"{method} {target}: {error or 'timed out'}") from None

    async def _exchange(self, method: str, target: str, body: bytes | None) -> tuple[int, bytes]:
        upstream = await Upstream.connect(self._socket)
        headers = [(b"Host", b"docker")]
        if body is not None:
            headers += [(b"Content-Type", b"application/json"), (b"Content-Length", str(len(body)).encode())]
        try:
            await upstream.send_head(method.encode(), target.encode(), headers, body=body, end=True)
            head, answer = await upstream.whole_answer(MAX_ANSWER_BYTES)
            return head.status, answer
        finally:
            upstream.close()

    async def version(self, timeout: float) -> str:
        """dockerd's version and API version ("20.10.24 (API 1.41)"); raises EngineError."""
        answer = await self.get_json("/version", timeout)
        if not isinstance(answer, dict):
            raise EngineError(f"GET /version: unexpected answer {answer!r:.200}")
        return f"{answer.get('Version', '?')} (API {answer.get('ApiVersion', '?')})"

    async def inspect(self, container_id: str) -> Any:
        return await self.get_json(f"{_container(container_id)}/json")

    async def update(self, container_id: str, resources: dict[str, Any]) -> None:
        """`POST /containers/{id}/update` with Docker's resource fields (absent or zero: unchanged)."""
        await self.post_json(f"{_container(container_id)}/update", resources)

    async def list_labelled(self, label: str) -> dict[str, dict[str, str]]:
        """All containers (running or not) that carry `label`: ID -> labels."""
        filters = urllib.parse.quote(json.dumps({"label": [label]}))
        found = await self.get_json(f"/containers/json?all=1&filters={filters}")
        listed: dict[str, dict[str, str]] = {}
        for entry in found or []:
            if isinstance(entry, dict) and entry.get("Id"):
                labels = entry.get("Labels")
                listed[str(entry["Id"])] = labels if isinstance(labels, dict) else {}
        return listed


def _message(answer: bytes) -> str:
    """dockerd's error message ({"message": ...}), else the answer's start."""
    try:
        decoded = json.loads(answer)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict) and isinstance(decoded.get("message"), str):
        return decoded["message"]
    return repr(answer[:200])


def _container(container_id: str) -> str:
    """A container's path in the Engine API (the ID quoted: it comes from answers and plugins)."""
    return f"/containers/{urllib.parse.quote(container_id, safe='')}"
