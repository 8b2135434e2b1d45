"""Replays cri-dockerd's side of the Docker Engine API: each CRI call as the requests cri-dockerd makes for it.

The requests (lines, headers, bodies) are `lab.cridockerd_requests`; this module sends them in cri-dockerd's
order over one kept-alive HTTP/1.1 connection (as its Go client does) to any Docker socket: dockerd's own, or a
Docker-mode proxy's. Every exchange is recorded, so a differential test can compare the answers of two
targets, and the lab can show what a plugin changed without cri-dockerd installed.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rplab import cridockerd_requests as shapes
from rplab.cridockerd_requests import PodShape
from rplab.dockerd import UnixHTTPConnection

REQUEST_TIMEOUT_SECONDS = 60.0
CONTAINER_STOP_SECONDS = 30  # the kubelet's default grace period


@dataclass(frozen=True)
class Exchange:
    """One request and dockerd's (or the proxy's) answer."""

    call: str  # the CRI call it belongs to
    method: str
    target: str
    status: int
    headers: tuple[tuple[str, str], ...]  # as received, names lower-cased
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    def header(self, name: str) -> str | None:
        return next((value for key, value in self.headers if key == name.lower()), None)


class ReplayError(RuntimeError):
    """A request was answered with an error status (what cri-dockerd would turn into a CRI error)."""

    def __init__(self, exchange: Exchange) -> None:
        try:
            message = str((exchange.json() or {}).get("message", ""))
        except ValueError:
            message = exchange.body.decode(errors="replace")
        super().__init__(f"{exchange.call}: {exchange.method} {exchange.target} answered {exchange.status}: {message}")
        self.exchange = exchange
        self.message = message


@dataclass
class Lifecycle:
    """What a whole pod life left behind: the IDs and the inspects taken along the way."""

    pod: PodShape
    sandbox_id: str = ""
    container_id: str = ""
    inspected: dict[str, Any] = field(default_factory=dict)  # "sandbox", "container", "updated container"


class CriDockerdReplay:
    """cri-dockerd in front of `socket`, minus cri-dockerd: one method per CRI call."""

    def __init__(self, socket: Path, timeout: float = REQUEST_TIMEOUT_SECONDS) -> None:
        self.socket = socket
        self.exchanges: list[Exchange] = []
        self._connection = UnixHTTPConnection(socket, timeout)

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> CriDockerdReplay:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- the wire ----------------------------------------------------------------------------------

    def send(self, call: str, method: str, target: str, body: shapes.Json | None = None,
             ok: tuple[int, ...] = ()) -> Exchange:
        """One request as cri-dockerd writes it; raises ReplayError unless the answer is 2xx (or in `ok`)."""
        data = shapes.go_json(body) if body is not None else None
        try:
            answer = self._round_trip(method, target, data)
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # The server closed the kept-alive connection while it was idle (a restart): like Go's
            # transport, send again on a new connection.
            self._connection.close()
            answer = self._round_trip(method, target, data)
        exchange = Exchange(call, method, target, answer.status,
                            tuple((name.lower(), value) for name, value in answer.getheaders()), answer.read())
        self.exchanges.append(exchange)
        if not (200 <= exchange.status < 300 or exchange.status in ok):
            raise ReplayError(exchange)
        return exchange

    def _round_trip(self, method: str, target: str, data: bytes | None) -> http.client.HTTPResponse:
        connection = self._connection
        connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        for name, value in shapes.headers(method, data):
            connection.putheader(name, value)
        connection.endheaders(data)
        return connection.getresponse()

    # -- CRI calls, as cri-dockerd makes them --------------------------------------------------------

    def run_pod_sandbox(self, pod: PodShape) -> str:
        body = shapes.fill(shapes.sandbox_create_body(pod), pod.placeholders())
        created = self.send("RunPodSandbox", "POST", shapes.create_target(shapes.sandbox_name(pod)), body)
        sandbox_id = str(created.json()["Id"])
        self.send("RunPodSandbox", "POST", shapes.start_target(sandbox_id))
        return sandbox_id

    def create_container(self, pod: PodShape, sandbox_id: str) -> str:
        body = shapes.fill(shapes.container_create_body(pod), pod.placeholders(sandbox_id))
        created = self.send("CreateContainer", "POST", shapes.create_target(shapes.container_name(pod)), body)
        return str(created.json()["Id"])

    def start_container(self, container_id: str) -> None:
        self.send("StartContainer", "POST", shapes.start_target(container_id))

    def update_container_resources(self, container_id: str, **resources: int) -> None:
        self.send("UpdateContainerResources", "POST", shapes.update_target(container_id),
                  shapes.update_body(**resources))

    def stop_container(self, container_id: str, seconds: int = CONTAINER_STOP_SECONDS) -> None:
        self.send("StopContainer", "POST", shapes.stop_target(container_id, seconds), ok=(304,))

    def stop_pod_sandbox(self, sandbox_id: str) -> None:
        self.send("StopPodSandbox", "POST", shapes.stop_target(sandbox_id, shapes.SANDBOX_STOP_SECONDS), ok=(304,))

    def remove_container(self, container_id: str) -> None:
        self.send("RemoveContainer", "DELETE", shapes.remove_target(container_id), ok=(404,))

    def remove_pod_sandbox(self, sandbox_id: str) -> None:
        """Every container of the sandbox, then the sandbox (cri-dockerd lists them by label)."""
        found = self.send("RemovePodSandbox", "GET", shapes.list_by_sandbox_target(sandbox_id)).json() or []
        for entry in found:
            self.send("RemovePodSandbox", "DELETE", shapes.remove_target(str(entry["Id"])), ok=(404,))
        self.send("RemovePodSandbox", "DELETE", shapes.remove_target(sandbox_id), ok=(404,))

    def inspect(self, container_id: str) -> Any:
        return self.send("ContainerStatus", "GET", shapes.inspect_target(container_id)).json()

    # -- a whole pod life --------------------------------------------------------------------------

    def lifecycle(self, pod: PodShape, update: dict[str, int] | None = None) -> Lifecycle:
        """RunPodSandbox, CreateContainer, StartContainer, UpdateContainerResources, StopContainer,
        StopPodSandbox, RemoveContainer, RemovePodSandbox; inspects after the start and after the update."""
        life = Lifecycle(pod)
        life.sandbox_id = self.run_pod_sandbox(pod)
        try:
            life.container_id = self.create_container(pod, life.sandbox_id)
            self.start_container(life.container_id)
            life.inspected["sandbox"] = self.inspect(life.sandbox_id)
            life.inspected["container"] = self.inspect(life.container_id)
            self.update_container_resources(life.container_id, **(update or {"memory": pod.memory // 2}))
            life.inspected["updated container"] = self.inspect(life.container_id)
            self.stop_container(life.container_id)
            self.stop_pod_sandbox(life.sandbox_id)
            self.remove_container(life.container_id)
            self.remove_pod_sandbox(life.sandbox_id)
        except BaseException:
            self.clean_up(life.sandbox_id)
            raise
        return life

    def clean_up(self, sandbox_id: str) -> None:
        """Best effort after a failure: the sandbox and its containers stopped and removed."""
        try:
            self.stop_pod_sandbox(sandbox_id)
            self.remove_pod_sandbox(sandbox_id)
        except (ReplayError, OSError, http.client.HTTPException):
            pass
