"""Docker Engine API bodies <-> hook-protocol messages: one small function per hooked call.

What cri-dockerd sends (see ../shared lab notes): a sandbox is a container labelled
`io.kubernetes.docker.type=podsandbox` named `k8s_POD_<pod>_<ns>_<uid>_<attempt>`; a container is labelled
`=container` with `io.kubernetes.sandbox.id=<sandbox id>` and named `k8s_<ctr>_<pod>_<ns>_<uid>_<attempt>`.
Pod labels are plain labels, annotations are `annotation.<key>` labels; cgroup parent and resources are in
`HostConfig`, the environment in `Env` (`Config.Env` in an inspect). The merge rules are the core's
(hooks.merge); this module only reads bodies into hook requests and writes the merged result back.

Writing back, a resource the hooks left zero or empty is never written: to dockerd zero means "not set",
so it would silently drop a limit rather than keep it (the Go proxy overwrites resources with zeros).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runtimeproxy.hooks.merge import ordered_env_names
from runtimeproxy.hooks.lifecycle import ResourceUpdate
from runtimeproxy.hooks.model import ContainerRecord, PodRecord, Resources

TYPE_LABEL = "io.kubernetes.docker.type"
SANDBOX_TYPE = "podsandbox"
CONTAINER_TYPE = "container"
SANDBOX_ID_LABEL = "io.kubernetes.sandbox.id"
ANNOTATION_PREFIX = "annotation."
# Labels cri-dockerd adds for itself: kept in the body, never shown to plugins as pod labels.
_SANDBOX_OWN_LABELS = frozenset({TYPE_LABEL, "io.kubernetes.container.name"})
_CONTAINER_OWN_LABELS = frozenset({TYPE_LABEL, SANDBOX_ID_LABEL, "io.kubernetes.container.logpath"})
_NAME_PREFIX = "k8s"

# Docker HostConfig / UpdateConfig field -> the model's (hooks.model.Resources; CRI's names).
RESOURCE_FIELDS: tuple[tuple[str, str], ...] = (
    ("CpuPeriod", "cpu_period"),
    ("CpuQuota", "cpu_quota"),
    ("CpuShares", "cpu_shares"),
    ("Memory", "memory_limit_in_bytes"),
    ("MemorySwap", "memory_swap_limit_in_bytes"),
    ("CpusetCpus", "cpuset_cpus"),
    ("CpusetMems", "cpuset_mems"),
    ("OomScoreAdj", "oom_score_adj"),  # HostConfig only (not updatable)
)

Body = dict[str, Any]


class BodyError(ValueError):
    """A hooked body that is not the JSON object Docker expects (it is then relayed untouched)."""


@dataclass(frozen=True)
class KubeName:
    """What cri-dockerd encodes in a container's name."""

    container: str  # "POD" for a sandbox
    pod: str
    namespace: str
    uid: str
    attempt: int


# --- reading -------------------------------------------------------------------------------------


def create_name(query: str) -> str:
    """The `name` of a `POST /containers/create?name=…`; "" when there is none."""
    values = urllib.parse.parse_qs(query).get("name")
    return values[0] if values else ""


def parse_kube_name(name: str) -> KubeName | None:
    """`k8s_<ctr>_<pod>_<ns>_<uid>_<attempt>` (a `_<random>` suffix after a name clash is allowed)."""
    parts = name.lstrip("/").split("_")
    if len(parts) not in (6, 7) or parts[0] != _NAME_PREFIX:
        return None
    try:
        attempt = int(parts[5])
    except ValueError:
        return None
    return KubeName(parts[1], parts[2], parts[3], parts[4], attempt)


def docker_type(labels: Mapping[str, str]) -> str:
    """`podsandbox`, `container`, or "" for a container Kubernetes did not create."""
    return labels.get(TYPE_LABEL, "")


def _map(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise BodyError(f"{what} is not a map of strings")
    return value


def _host_config(body: Mapping[str, Any]) -> dict[str, Any]:
    host_config = body.get("HostConfig") or {}
    if not isinstance(host_config, dict):
        raise BodyError("HostConfig is not an object")
    return host_config


def annotations_of(labels: Mapping[str, str]) -> dict[str, str]:
    return {key[len(ANNOTATION_PREFIX):]: value for key, value in labels.items() if key.startswith(ANNOTATION_PREFIX)}


def pod_labels_of(labels: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in labels.items()
            if not key.startswith(ANNOTATION_PREFIX) and key not in _SANDBOX_OWN_LABELS}


def container_labels_of(labels: Mapping[str, str]) -> dict[str, str]:
    """A container's CRI labels, as cri-dockerd reports them: its Docker labels less the annotations and
    cri-dockerd's own (type, sandbox ID, log path)."""
    return {key: value for key, value in labels.items()
            if not key.startswith(ANNOTATION_PREFIX) and key not in _CONTAINER_OWN_LABELS}


def envs_of(env: Any) -> dict[str, str]:
    """`["K=V", …]` as a map in order; an entry without `=` is not an assignment and is left out."""
    if env is None:
        return {}
    if not isinstance(env, list) or not all(isinstance(entry, str) for entry in env):
        raise BodyError("Env is not a list of strings")
    pairs = (entry.partition("=") for entry in env)
    return {name: value for name, sep, value in pairs if sep}


def resources_of(fields: Mapping[str, Any]) -> Resources:
    """The resources a HostConfig (or an UpdateConfig) sets; absent or zero fields stay unset."""
    settings: dict[str, Any] = {}
    for docker_name, model_name in RESOURCE_FIELDS:
        value = fields.get(docker_name)
        if value:
            if not _fits(model_name, value):
                raise BodyError(f"{docker_name} has the wrong type: {value!r}")
            settings[model_name] = value
    return Resources(**settings)


_INT64 = range(-(1 << 63), 1 << 63)  # the wire's int64 (CRI's and the hook protocol's fields)


def _fits(model_name: str, value: object) -> bool:
    if model_name.startswith("cpuset"):
        return isinstance(value, str)
    return isinstance(value, int) and not isinstance(value, bool) and value in _INT64


def pod_model(name: KubeName, labels: Mapping[str, str], host_config: Mapping[str, Any]) -> PodRecord:
    """The pod a sandbox's create (or inspect) says (the core decides the rest: hooks.context's `admitted`)."""
    return PodRecord(name=name.pod, namespace=name.namespace, uid=name.uid, attempt=name.attempt,
                     labels=pod_labels_of(labels), annotations=annotations_of(labels),
                     cgroup_parent=host_config.get("CgroupParent") or "", resources=resources_of(host_config))


def container_model(name: KubeName, labels: Mapping[str, str], env: Any, host_config: Mapping[str, Any],
                    container_id: str = "") -> ContainerRecord:
    """The container a create (or inspect) says, of the sandbox its labels name; its edits (argv, mounts,
    devices, ...) are the caller's (docker.edits)."""
    return ContainerRecord(labels.get(SANDBOX_ID_LABEL, ""), id=container_id, name=name.container,
                           attempt=name.attempt, annotations=annotations_of(labels), env=envs_of(env),
                           resources=resources_of(host_config), labels=container_labels_of(labels))


# --- create: the body as dockerd receives it ------------------------------------------------------


def sandbox_of_create(name: KubeName, body: Body) -> PodRecord:
    return pod_model(name, _map(body.get("Labels"), "Labels"), _host_config(body))


def container_of_create(name: KubeName, body: Body) -> ContainerRecord:
    return container_model(name, _map(body.get("Labels"), "Labels"), body.get("Env"), _host_config(body))


def pod_of_container(name: KubeName, body: Body) -> PodRecord:
    """What a container's create says of its pod, for a pod the proxy does not know: its metadata (from the
    name) and its cgroup parent (cri-dockerd creates a container under its pod's). Pod labels are not there."""
    return PodRecord(name=name.pod, namespace=name.namespace, uid=name.uid,
                     cgroup_parent=_host_config(body).get("CgroupParent") or "")


def apply_resources(host_config: dict[str, Any], resources: Resources | None) -> None:
    """Write the resources the plugins left non-zero; a zero or empty value never overwrites one."""
    for docker_name, model_name in RESOURCE_FIELDS:
        value = getattr(resources, model_name) if resources is not None else None
        if value and host_config.get(docker_name) != value:
            host_config[docker_name] = value


def _labels_with_annotations(labels: Mapping[str, str], annotations: Mapping[str, str]) -> dict[str, str]:
    kept = {key: value for key, value in labels.items() if not key.startswith(ANNOTATION_PREFIX)}
    kept.update((ANNOTATION_PREFIX + key, value) for key, value in annotations.items())
    return kept


def apply_to_sandbox_body(body: Body, pod: PodRecord) -> None:
    labels = {key: value for key, value in _map(body.get("Labels"), "Labels").items() if key in _SANDBOX_OWN_LABELS}
    labels.update(pod.labels)
    body["Labels"] = _labels_with_annotations(labels, pod.annotations)
    host_config = body.setdefault("HostConfig", {})
    if pod.cgroup_parent:
        host_config["CgroupParent"] = pod.cgroup_parent
    apply_resources(host_config, pod.resources)


def apply_to_container_body(body: Body, container: ContainerRecord) -> None:
    """(The cgroup parent the container goes under is its pod's: apply_cgroup_parent.)"""
    body["Labels"] = _labels_with_annotations(_map(body.get("Labels"), "Labels"), container.annotations)
    original = body.get("Env") or []
    envs = container.env
    names = ordered_env_names(envs, [entry.partition("=")[0] for entry in original if "=" in entry])
    body["Env"] = [f"{name}={envs[name]}" for name in names] + [entry for entry in original if "=" not in entry]
    apply_resources(body.setdefault("HostConfig", {}), container.resources)


def apply_cgroup_parent(body: Body, cgroup_parent: str) -> bool:
    """dockerd places the container under HostConfig.CgroupParent: make it `cgroup_parent` ("" leaves it).
    True if the body changed."""
    if not cgroup_parent:
        return False
    host_config = body.setdefault("HostConfig", {})
    if host_config.get("CgroupParent") == cgroup_parent:
        return False
    host_config["CgroupParent"] = cgroup_parent
    return True


# --- update ---------------------------------------------------------------------------------------


def update_resources(body: Body) -> Resources:
    """What a `POST /containers/{id}/update` asks for (zero = unchanged, as in CRI)."""
    return resources_of(body)


# What `POST /containers/{id}/update` can change (dockerd cannot update the OOM score).
_UPDATABLE_FIELDS = tuple(field for field in RESOURCE_FIELDS if field[0] != "OomScoreAdj")


def _updatable(resources: Resources) -> Body:
    """The non-zero updatable resources, by dockerd's names (a zero means "unchanged" to dockerd)."""
    return {docker_name: value for docker_name, model_name in _UPDATABLE_FIELDS
            if (value := getattr(resources, model_name))}


def apply_to_update_body(body: Body, update: ResourceUpdate) -> None:
    """Only what the plugins changed, never a zero (the core's ResourceUpdate decides what)."""
    body.update(_updatable(update.resource_changes()))


def update_config(resources: Resources) -> Body:
    """The body of the proxy's own `POST /containers/{id}/update` (NRI plugins' updates of other containers):
    the non-zero resources. Raises BodyError for what dockerd's update cannot take (hugepages, unified keys,
    the OOM score)."""
    for model_name in ("hugepage_limits", "unified", "oom_score_adj"):
        if getattr(resources, model_name):
            raise BodyError(f"dockerd cannot update {model_name} of a container")
    return _updatable(resources)


# --- inspect (recovery) ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Inspected:
    """The parts of `GET /containers/{id}/json` the hooks need."""

    container_id: str
    name: KubeName
    labels: dict[str, str]
    env: list[str]
    host_config: dict[str, Any]
    state: dict[str, Any] = field(default_factory=dict)  # State: Status, Pid, StartedAt, FinishedAt
    argv: tuple[str, ...] = ()  # Path + Args: what dockerd runs
    created: str = ""  # Created (RFC 3339)

    @property
    def kind(self) -> str:
        return docker_type(self.labels)

    @property
    def sandbox_id(self) -> str:
        return self.labels.get(SANDBOX_ID_LABEL, "")


def inspected(data: Any) -> Inspected | None:
    """None for a container Kubernetes did not create (or an answer of an unexpected shape)."""
    if not isinstance(data, dict):
        return None
    config = data.get("Config") or {}
    try:
        labels = _map(config.get("Labels"), "Labels")
        host_config = _host_config(data)
    except BodyError:
        return None
    name = parse_kube_name(str(data.get("Name") or ""))
    if name is None or not docker_type(labels):
        return None
    state = data.get("State")
    args = data.get("Args")
    argv = [data.get("Path"), *(args if isinstance(args, list) else [])] if data.get("Path") else []
    return Inspected(str(data.get("Id") or ""), name, labels, list(config.get("Env") or []), host_config,
                     state if isinstance(state, dict) else {}, tuple(str(arg) for arg in argv),
                     str(data.get("Created") or ""))


def pod_from_inspect(found: Inspected) -> PodRecord:
    return pod_model(found.name, found.labels, found.host_config)


def container_from_inspect(found: Inspected) -> ContainerRecord:
    return container_model(found.name, found.labels, found.env, found.host_config, found.container_id)
