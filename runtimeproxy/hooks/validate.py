"""Is a plugin's answer safe to apply? Checks on what a pre-hook response would change.

Only what the merge rules (hooks.merge) would take from the answer *and* that differs from the
request is checked: an echoed value changes nothing, whatever it is (it came from the kubelet), and a
value the merge ignores (a size <= 0, an empty cgroup parent, an empty env map) never reaches the
runtime. Each rule is a small pure function returning why a value is bad, or None; the answer-level
functions return the first Problem, naming the response field.

Swap: memory and swap are checked as the merge leaves them (swap follows a new memory limit unless the plugin
set it, hooks.merge), so koordlet's "raise memory, echo swap" passes; a swap limit that would end below the
memory limit (other than 0, unset, and -1, unlimited) is refused naming the plugin's swap field if it set one,
else its memory field: runc would fail StartContainer or the update, dockerd the create, with an opaque error.

Cgroup parents: containerd 1.6 turns the pod's cgroup parent into the container's cgroups path: a
parent whose last element ends in ".slice" becomes runc's systemd form "<that slice>:cri-containerd:<id>",
anything else is joined as a path (so "../../x" or "x" land relative to wherever runc runs). The kubelet
sends an absolute path ("/kubepods/burstable/pod<uid>", or with the systemd driver
"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice"). So a plugin may answer a
clean absolute path or a bare slice name; runc's "slice:prefix:name" form is containerd's to build and
is refused. A new parent must also stay in the pod's top-level hierarchy (the first path element or
top slice of the parent the pod has, "kubepods" on a node): the kubelet enforces node allocatable and
cleans up pods there, so a pod moved outside it escapes both. Moving within it (another QoS tier, a
resource manager's own sub-tree) is what plugins are for, so the pod's own parent is not a bound.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from google.protobuf.message import Message

from runtimeproxy.hooks.merge import SWAP_UNLIMITED, SWAP_UNSET, merged_memory_and_swap, plugin_set_swap
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

OOM_SCORE_ADJ_MIN = -1000
OOM_SCORE_ADJ_MAX = 1000
# Kernel CFS bounds (cgroup v1 cpu.cfs_*_us, v2 cpu.max), microseconds.
CPU_PERIOD_MIN_US = 1_000
CPU_PERIOD_MAX_US = 1_000_000
CPU_QUOTA_MIN_US = 1_000
CPU_QUOTA_UNLIMITED = -1
# cgroup v1 cpu.shares range (runc maps it onto v2 cpu.weight 1..10000).
CPU_SHARES_MIN = 2
CPU_SHARES_MAX = 262_144
CGROUP_NAME_MAX_BYTES = 255  # one path element (NAME_MAX)
QUALIFIED_NAME_MAX_CHARS = 63
DNS_SUBDOMAIN_MAX_CHARS = 253
_QUOTED_MAX_CHARS = 80

_CPU_LIST = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")
_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_SLICE_NAME = re.compile(r"[A-Za-z0-9_.\\]+(-[A-Za-z0-9_.\\]+)*\.slice")
_SLICE_SUFFIX = ".slice"


@dataclass(frozen=True)
class Problem:
    field: str  # the response field, e.g. "container_resources.cpuset_cpus" or 'container_envs["A=B"]'
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


def quoted(value: str) -> str:
    """A value as it appears in a message: JSON-quoted (NUL shows as \\u0000), long ones cut."""
    text = json.dumps(value)
    return text if len(text) <= _QUOTED_MAX_CHARS else text[: _QUOTED_MAX_CHARS - 4] + '..."'


# --- rules, one per kind of value ------------------------------------------------------------


def nul_problem(value: str) -> str | None:
    return f"{quoted(value)} contains a NUL byte" if "\0" in value else None


def cpu_list_problem(value: str) -> str | None:
    """Linux list format ("0-3,8,10-11"); empty means "keep" to the runtime and is fine."""
    if not value:
        return None
    if not _CPU_LIST.fullmatch(value):
        return f"{quoted(value)} is not a cpu list (like 0-3,8)"
    for part in value.split(","):
        low, _, high = part.partition("-")
        if high and int(high) < int(low):
            return f"{quoted(value)} has a descending range {part}"
    return None


def _range_problem(value: int, low: int, high: int, unit: str = "") -> str | None:
    return None if low <= value <= high else f"{value} is outside [{low}, {high}]{unit}"


def oom_score_adj_problem(value: int) -> str | None:
    return _range_problem(value, OOM_SCORE_ADJ_MIN, OOM_SCORE_ADJ_MAX)


def cpu_period_problem(value: int) -> str | None:
    return _range_problem(value, CPU_PERIOD_MIN_US, CPU_PERIOD_MAX_US, " microseconds")


def cpu_shares_problem(value: int) -> str | None:
    return _range_problem(value, CPU_SHARES_MIN, CPU_SHARES_MAX)


def cpu_quota_problem(value: int) -> str | None:
    if value == CPU_QUOTA_UNLIMITED or value >= CPU_QUOTA_MIN_US:
        return None
    return f"{value} is neither {CPU_QUOTA_UNLIMITED} (unlimited) nor at least {CPU_QUOTA_MIN_US} microseconds"


def env_name_problem(name: str) -> str | None:
    if not name:
        return "an empty variable name"
    if "=" in name:
        return f"variable name {quoted(name)} contains '='"
    return nul_problem(name)


def qualified_name_problem(key: str, *, prefix_case_matters: bool = True) -> str | None:
    """Kubernetes' qualified name: [DNS-subdomain prefix "/"] name of 1-63 alphanumerics, '-', '_', '.'."""
    if not key:
        return "an empty key"
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return f"key {quoted(key)} has an empty prefix"
    if slash:
        checked = prefix if prefix_case_matters else prefix.lower()
        if len(prefix) > DNS_SUBDOMAIN_MAX_CHARS or not _DNS_SUBDOMAIN.fullmatch(checked):
            return f"key {quoted(key)}: prefix is not a DNS subdomain"
    if len(name) > QUALIFIED_NAME_MAX_CHARS or not _QUALIFIED_NAME.fullmatch(name):
        return (f"key {quoted(key)}: name must be 1-{QUALIFIED_NAME_MAX_CHARS} alphanumerics, '-', '_' or '.', "
                "starting and ending alphanumeric")
    return None


def label_key_problem(key: str) -> str | None:
    return qualified_name_problem(key)


def annotation_key_problem(key: str) -> str | None:
    # The API server checks annotation keys lowercased: upper-case prefixes pass there.
    return qualified_name_problem(key, prefix_case_matters=False)


def unified_key_problem(key: str) -> str | None:
    """A cgroup v2 interface file name such as "memory.high": one path element."""
    if not key or key in (".", "..") or "/" in key:
        return f"{quoted(key)} is not a cgroup file name"
    return nul_problem(key)


def slice_name_problem(name: str) -> str | None:
    if len(name.encode()) > CGROUP_NAME_MAX_BYTES or not _SLICE_NAME.fullmatch(name):
        return f"{quoted(name)} is not a systemd slice name (like kubepods-burstable.slice)"
    return None


def cgroup_path_problem(path: str) -> str | None:
    """An absolute, normalised path: no empty, "." or ".." elements, no trailing slash."""
    if not path.startswith("/"):
        return f"{quoted(path)} is neither an absolute path nor a systemd slice name"
    elements = path[1:].split("/")
    if elements == [""]:
        return "the root cgroup is not a pod's parent"
    for element in elements:
        if element in ("", ".", ".."):
            return f"{quoted(path)} is not a clean path (empty, '.' or '..' element)"
        if len(element.encode()) > CGROUP_NAME_MAX_BYTES:
            return f"{quoted(path)} has an element longer than {CGROUP_NAME_MAX_BYTES} bytes"
    return None


def _parent_syntax_problem(parent: str) -> str | None:
    if "/" in parent or not parent.endswith(_SLICE_SUFFIX):
        return cgroup_path_problem(parent)
    return slice_name_problem(parent)


def _systemd_driver(parent: str) -> bool:
    return parent.rsplit("/", 1)[-1].endswith(_SLICE_SUFFIX)


def cgroup_hierarchy(parent: str) -> str:
    """The top-level cgroup a parent is in: "kubepods" for "/kubepods/burstable/pod1" and for
    "kubepods-burstable-pod1.slice" (systemd nests slices by their dash-separated prefixes)."""
    if _systemd_driver(parent):
        return parent.rsplit("/", 1)[-1][: -len(_SLICE_SUFFIX)].split("-", 1)[0]
    return parent.lstrip("/").split("/", 1)[0]


def cgroup_parent_problem(value: str, current: str) -> str | None:
    """A new cgroup parent for a pod whose parent is `current` (empty: the runtime's default)."""
    if problem := nul_problem(value):
        return problem
    if ":" in value:
        return (f"{quoted(value)}: the \"slice:prefix:name\" form is containerd's to build; "
                "give a path or a slice name")
    problem = _parent_syntax_problem(value)
    if problem or not current or _parent_syntax_problem(current):
        return problem  # no (valid) current parent: nothing to stay within
    if _systemd_driver(value) != _systemd_driver(current):
        return f"{quoted(value)} and the pod's parent {quoted(current)} are for different cgroup drivers"
    if cgroup_hierarchy(value) != cgroup_hierarchy(current):
        return (f"{quoted(value)} is outside {quoted(cgroup_hierarchy(current))}, the hierarchy of the pod's "
                f"parent {quoted(current)}")
    return None


# --- answers ---------------------------------------------------------------------------------


def _changed(current: Mapping[str, str], answer: Mapping[str, str]) -> list[tuple[str, str]]:
    return [(key, value) for key, value in sorted(answer.items()) if current.get(key) != value]


Rule = Callable[[str], "str | None"]


def _map_problem(field: str, current: Mapping[str, str], answer: Mapping[str, str],
                 key_rule: Rule, value_rule: Rule = nul_problem) -> Problem | None:
    for key, value in _changed(current, answer):
        reason = key_rule(key) or value_rule(value)
        if reason:
            return Problem(f"{field}[{quoted(key)}]", reason)
    return None


def swap_problem(memory: int, swap: int) -> str | None:
    """memory_swap_limit_in_bytes is memory + swap: below the memory limit runc and dockerd refuse it."""
    if memory <= 0 or swap in (SWAP_UNSET, SWAP_UNLIMITED) or swap >= memory:
        return None
    return (f"the swap limit (memory + swap) would be {swap}, below the memory limit {memory}; it must be at "
            f"least the memory limit, {SWAP_UNSET} (unset) or {SWAP_UNLIMITED} (unlimited)")


def _memory_swap_problem(field: str, current: hooks.LinuxContainerResources,
                         answer: hooks.LinuxContainerResources) -> Problem | None:
    """Memory and swap as the merge leaves them (swap follows a new memory limit unless the plugin set it)."""
    sets_swap = plugin_set_swap(current, answer)
    changes_memory = answer.memory_limit_in_bytes > 0 and answer.memory_limit_in_bytes != current.memory_limit_in_bytes
    if not (sets_swap or changes_memory):
        return None
    reason = swap_problem(*merged_memory_and_swap(current, answer))
    if reason is None:
        return None
    return Problem(f"{field}.{'memory_swap_limit_in_bytes' if sets_swap else 'memory_limit_in_bytes'}", reason)


def resources_problem(field: str, current: hooks.LinuxContainerResources,
                      answer: hooks.LinuxContainerResources) -> Problem | None:
    """The fields merge_resources takes: sizes and CPU values when > 0 (quota when != 0), the rest always."""
    checks: list[tuple[str, bool, str | None]] = [
        ("cpu_period", answer.cpu_period > 0, cpu_period_problem(answer.cpu_period)),
        ("cpu_quota", answer.cpu_quota != 0, cpu_quota_problem(answer.cpu_quota)),
        ("cpu_shares", answer.cpu_shares > 0, cpu_shares_problem(answer.cpu_shares)),
        ("oom_score_adj", True, oom_score_adj_problem(answer.oom_score_adj)),
        ("cpuset_cpus", True, cpu_list_problem(answer.cpuset_cpus)),
        ("cpuset_mems", True, cpu_list_problem(answer.cpuset_mems)),
    ]
    for name, taken, reason in checks:
        if taken and reason and getattr(answer, name) != getattr(current, name):
            return Problem(f"{field}.{name}", reason)
    return (_memory_swap_problem(field, current, answer)
            or _map_problem(f"{field}.unified", current.unified, answer.unified, unified_key_problem))


def _cgroup_parent_change_problem(field: str, current: str, answer: str) -> Problem | None:
    if not answer or answer == current:  # the merge takes only a non-empty parent
        return None
    reason = cgroup_parent_problem(answer, current)
    return Problem(field, reason) if reason else None


def _resources_change_problem(field: str, request: Message, response: Message) -> Problem | None:
    if not response.HasField(field):  # no resources message: the merge changes none
        return None
    return resources_problem(field, getattr(request, field), getattr(response, field))


def pod_answer_problem(request: hooks.PodSandboxHookRequest,
                       response: hooks.PodSandboxHookResponse) -> Problem | None:
    return (_cgroup_parent_change_problem("cgroup_parent", request.cgroup_parent, response.cgroup_parent)
            or _resources_change_problem("resources", request, response)
            or _map_problem("labels", request.labels, response.labels, label_key_problem)
            or _map_problem("annotations", request.annotations, response.annotations, annotation_key_problem))


def container_answer_problem(request: hooks.ContainerResourceHookRequest,
                             response: hooks.ContainerResourceHookResponse) -> Problem | None:
    return (_cgroup_parent_change_problem("pod_cgroup_parent", request.pod_cgroup_parent,
                                          response.pod_cgroup_parent)
            or _resources_change_problem("container_resources", request, response)
            or _map_problem("container_envs", request.container_envs, response.container_envs, env_name_problem)
            or _map_problem("container_annotations", request.container_annotations,
                            response.container_annotations, annotation_key_problem))


def answer_problem(request: Message, response: Message) -> Problem | None:
    """The first problem in a pre-hook's answer, or None if it is safe to merge and apply."""
    if isinstance(response, hooks.PodSandboxHookResponse):
        return pod_answer_problem(request, response)  # type: ignore[arg-type]
    if isinstance(response, hooks.ContainerResourceHookResponse):
        return container_answer_problem(request, response)  # type: ignore[arg-type]
    return None
