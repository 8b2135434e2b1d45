"""What containerd tells of its pods and containers, for the hook core's store (hooks.rebuild after a
restart, hooks.context on a miss): a lister and loaders, translation only.

containerd's verbose PodSandboxStatus/ContainerStatus carry, in info["info"], the CRI
config it was created with (as JSON with proto field names) — after our hooks changed
it, since that is what we sent. So cgroup parent, resources and envs survive a proxy
restart (the Go reference loses them). Current container resources come from
ContainerStatus.resources, which follows UpdateContainerResources. The rest of a container's model
(hooks.model) comes along: its labels, state and times (the status), its argv (the OCI spec's process), its
pid (the task's), its bind mounts and devices (the config).

A verbose status holds the config twice (config and OCI spec), so a container with a large environment
has one over the 16 MiB containerd sends by default (its grpc max_send_message_size): containerd answers
RESOURCE_EXHAUSTED whatever the proxy's own receive limit. Such an object is still recorded, from its plain
status (metadata, labels, annotations, current resources; the pod ID from ListContainers): every object the
runtime lists gets a record, so its post-hooks run after a restart, without what only the config had
(envs, and a pod's cgroup parent and resources).
"""

from __future__ import annotations

import base64
from dataclasses import replace
import binascii
import logging
from typing import Any, TypeVar

import grpc
import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from runtimeproxy.cri.backend import BackendChannel
from runtimeproxy.cri.edits import container_edits
from runtimeproxy.cri.messages import container_labels, container_model, pod_model
from runtimeproxy.gotext import go_text
from runtimeproxy.hooks.hook_messages import resources_of
from runtimeproxy.hooks.model import ContainerRecord, ContainerState, PodRecord
from runtimeproxy.hooks.rebuild import Listing
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri

log = logging.getLogger(__name__)
M = TypeVar("M", bound=Message)

# v1 first; containerd 1.6 also serves v1alpha2 (only) for very old setups.
_API_VERSIONS = ("runtime.v1", "runtime.v1alpha2")
_STATUS_TIMEOUT = 10.0


class BackendReadError(Exception):
    def __init__(self, message: str, code: grpc.StatusCode | None) -> None:
        super().__init__(message)
        self.code = code


class BackendRecords:
    """Reads pods and containers back from the runtime with verbose status calls (cri.runtime's loaders)."""

    name = "the backend"

    def __init__(self, backend: BackendChannel) -> None:
        self._channel = backend.channel

    async def _call(self, method: str, request: Message, response_type: type[M]) -> M:
        """A raw call (v1, else v1alpha2) decoded here, so a bad answer is our error, not gRPC's."""
        data = request.SerializeToString()
        for version in _API_VERSIONS:
            call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = self._channel.unary_unary(
                f"/{version}.RuntimeService/{method}")
            try:
                answer = await call(data, timeout=_STATUS_TIMEOUT)
            except grpc.aio.AioRpcError as error:
                if error.code() is grpc.StatusCode.UNIMPLEMENTED and version != _API_VERSIONS[-1]:
                    continue
                raise BackendReadError(f"{method}: {error.code().name}: {error.details()}", error.code()) from None
            try:
                return response_type.FromString(answer)
            except DecodeError as error:
                raise BackendReadError(f"{method}: undecodable answer: {error}", None) from None
        raise AssertionError("unreachable")

    async def load_pod(self, pod_id: str) -> PodRecord | None:
        """The pod as the backend has it; None (logged) when it cannot be had."""
        try:
            return await self._load_pod(pod_id)
        except Exception:  # a store fill must never fail the CRI call that needed it
            log.exception("cannot load pod %s from the backend", pod_id)
            return None

    async def load_container(self, container_id: str, pod_id: str = "") -> ContainerRecord | None:
        """`pod_id` (from a list) spares a ListContainers when the verbose status is too large."""
        try:
            return await self._load_container(container_id, pod_id)
        except Exception:
            log.exception("cannot load container %s from the backend", container_id)
            return None

    async def _status(self, kind: str, object_id: str, method: str, request: Message,
                      response_type: type[M]) -> M:
        """The verbose status; the plain one when the verbose one is too large for the runtime to send."""
        try:
            return await self._call(method, request, response_type)
        except BackendReadError as error:
            if error.code is not grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            log.info("the verbose status of %s %s is too large to be had (%s); recording it from its plain status, "
                     "without what only its config has", kind, object_id, error)
        plain = type(request)()
        plain.CopyFrom(request)
        plain.verbose = False  # type: ignore[attr-defined]
        return await self._call(method, plain, response_type)

    async def _pod_of(self, container_id: str) -> str:
        """The container's pod ID from a list ("" if it cannot be had: the record still serves its own hooks)."""
        try:
            found = await self._call(
                "ListContainers",
                cri.ListContainersRequest(filter=cri.ContainerFilter(id=container_id)),
                cri.ListContainersResponse,
            )
        except BackendReadError as error:
            log.warning("cannot find the pod of container %s: %s", container_id, error)
            return ""
        return found.containers[0].pod_sandbox_id if found.containers else ""

    async def _load_pod(self, pod_id: str) -> PodRecord | None:
        try:
            status = await self._status(
                "pod", pod_id, "PodSandboxStatus",
                cri.PodSandboxStatusRequest(pod_sandbox_id=pod_id, verbose=True),
                cri.PodSandboxStatusResponse,
            )
        except BackendReadError as error:
            _log_miss("pod", pod_id, error)
            return None
        info = _verbose_info(status)
        config = _parse_config(info.get("config"), cri.PodSandboxConfig)
        if config is None:  # a runtime without the verbose config: rebuild what the status has
            config = cri.PodSandboxConfig(
                metadata=status.status.metadata,
                labels=status.status.labels,
                annotations=status.status.annotations,
            )
        handler = info.get("runtimeHandler") or status.status.runtime_handler
        return pod_model(config, handler)

    async def _load_container(self, container_id: str, pod_id: str) -> ContainerRecord | None:
        try:
            status = await self._status(
                "container", container_id, "ContainerStatus",
                cri.ContainerStatusRequest(container_id=container_id, verbose=True),
                cri.ContainerStatusResponse,
            )
        except BackendReadError as error:
            _log_miss("container", container_id, error)
            return None
        info = _verbose_info(status)
        config = _container_config(info)
        plain = cri.ContainerConfig(metadata=status.status.metadata, annotations=status.status.annotations)
        pod_id = info.get("sandboxID") or pod_id or await self._pod_of(container_id)
        container = container_model(pod_id, config or plain, container_id)
        if status.status.resources.HasField("linux"):  # current values, after any update
            container.resources = resources_of(status.status.resources.linux)
        return recorded_container(container, config, status.status, info)

    async def list_objects(self) -> Listing:
        """Every pod and container the runtime lists, once it is reachable."""
        await self._channel.channel_ready()
        pods = await self._call("ListPodSandbox", cri.ListPodSandboxRequest(), cri.ListPodSandboxResponse)
        containers = await self._call("ListContainers", cri.ListContainersRequest(), cri.ListContainersResponse)
        return Listing([pod.id for pod in pods.items], {c.id: c.pod_sandbox_id for c in containers.containers})


_STATES = {cri.CONTAINER_CREATED: ContainerState.CREATED, cri.CONTAINER_RUNNING: ContainerState.RUNNING,
           cri.CONTAINER_EXITED: ContainerState.STOPPED}


def recorded_container(container: ContainerRecord, config: cri.ContainerConfig | None, status: cri.ContainerStatus,
                       info: dict[str, Any]) -> ContainerRecord:
    """The model of a container as its config says it, with its labels (the status's when there is no config),
    state and times from its status; from the verbose info (when there is one) the argv and pid (the OCI spec's
    process, the task's) and the bind mounts and devices of its CRI config."""
    edits = None
    if config is not None:
        spec = info.get("runtimeSpec")
        process = spec.get("process") if isinstance(spec, dict) else None
        argv = process.get("args") if isinstance(process, dict) else None
        edits = container_edits(cri.CreateContainerRequest(config=config),
                                tuple(str(arg) for arg in argv) if isinstance(argv, list) else ())
    pid = info.get("pid")
    return replace(
        container, labels=container_labels(config.labels if config is not None else status.labels), edits=edits,
        state=_STATES.get(status.state, ContainerState.UNKNOWN), pid=pid if isinstance(pid, int) and pid > 0 else 0,
        created_ns=status.created_at, started_ns=status.started_at, finished_ns=status.finished_at)


def _verbose_info(status: Message) -> dict[str, Any]:
    raw = status.info.get("info")  # type: ignore[attr-defined]
    if not raw:
        return {}
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _parse_config(data: Any, message_type: type[Message]) -> Any:
    if not isinstance(data, dict):
        return None
    try:
        return json_format.ParseDict(data, message_type(), ignore_unknown_fields=True)
    except json_format.ParseError as error:
        log.warning("cannot read the backend's %s: %s", message_type.DESCRIPTOR.name, error)
        return None


def _container_config(info: dict[str, Any]) -> cri.ContainerConfig | None:
    """The container's CRI config from the verbose info; its env values as the kubelet's bytes."""
    data = info.get("config")
    if not isinstance(data, dict):
        return None
    config = _parse_config({name: value for name, value in data.items() if name != "envs"}, cri.ContainerConfig)
    envs = data.get("envs")
    if config is not None and isinstance(envs, list):
        process = info.get("runtimeSpec", {}).get("process", {})
        spec_env = set(process.get("env", [])) if isinstance(process, dict) else set()
        config.envs.extend(cri.KeyValue(key=entry["key"], value=_recorded_env_value(entry, spec_env))
                           for entry in envs
                           if isinstance(entry, dict) and isinstance(entry.get("key"), str))
    return config


def _recorded_env_value(entry: dict[str, Any], spec_env: set[str]) -> bytes:
    """containerd writes the config with Go's encoding/json: a value is text where its cri-api types it as a
    string, base64 where as bytes (cri-api v0.34.9 / v0.35.6 / v0.36.2 on). The OCI spec's env, always text,
    tells which; without a match the value is taken as text."""
    key, value = entry["key"], entry.get("value", "")
    if not isinstance(value, str):
        return b""
    if f"{key}={value}" in spec_env:
        return value.encode()
    try:
        decoded = base64.b64decode(value, validate=True)
    except binascii.Error:
        return value.encode()
    return decoded if f"{key}={go_text(decoded)}" in spec_env else value.encode()


def _log_miss(kind: str, object_id: str, error: BackendReadError) -> None:
    level = logging.DEBUG if error.code is grpc.StatusCode.NOT_FOUND else logging.WARNING
    log.log(level, "cannot load %s %s from the backend: %s", kind, object_id, error)

