"""Is what the plugins answered safe to apply? Two steps, each a set of small pure rules returning why a value
is bad, or None; the step functions return the first Problem, naming the field.

Per answer, before it is folded (`answer_only_problem`; hooks.dispatcher for a hook plugin's answer, nri.call for
an NRI plugin's): what only the answer itself shows — an answer for another pod or container (a kubelet key given
a new value, another pod's cgroup as the parent) and how much one answer adds (per map, in all). Decoding, and
NRI's refused fields and conflicts (nri.adjust), are judged there too, by their protocol.

Once over the chain's result (`result_problem`; hooks.chain.ChainRecord.settle, after the chain's last plugin of
any kind): the values as every plugin left them, where they differ from the kubelet's request — each value by
its rule (ranges, cpu lists, key and value syntax and lengths, cgroup parents), and the rules relating fields
(memory against swap, the annotations' total). A Problem names in `fields` what it depends on, as hooks.changes
names fields: the chain blames the plugin that set the latest of them. `answer_problem` is both steps for one
answer alone (a plugin in shadow, `runtimeproxyctl try-plugin`).

Only values that differ from the kubelet's request are checked: an echoed value changes nothing, whatever it
is (it came from the kubelet), and a value the merge ignores (a size <= 0, an empty cgroup parent, an empty env
map) never reaches the runtime.

Swap: memory and swap are checked as they are left (a hook plugin's new memory limit takes swap along unless it
set swap, hooks.merge; an NRI plugin's does not), so koordlet's "raise memory, echo swap" passes; a swap limit
that would end below the memory limit (other than 0, unset, and -1, unlimited) is refused naming the swap field
if it changed, else the memory field: runc would fail StartContainer or the update, dockerd the create, with an
opaque error.

Cgroup parents: containerd 1.6 turns the pod's cgroup parent into the container's cgroups path: a
parent whose last element ends in ".slice" becomes runc's systemd form "<that slice>:cri-containerd:<id>",
anything else is joined as a path (so "../../x" or "x" land relative to wherever runc runs). The kubelet
sends an absolute path ("/kubepods/burstable/pod<uid>", or with the systemd driver
"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice"). So a plugin may answer a
clean absolute path or a bare slice name; runc's "slice:prefix:name" form is containerd's to build and
is refused. A new parent must also stay in the pod's top-level hierarchy (the first path element or
top slice of the parent the pod has, "kubepods" on a node): the kubelet enforces node allocatable and
cleans up pods there, so a pod moved outside it escapes both. Moving within it (another QoS tier, a
resource manager's own sub-tree) is what plugins are for, so the pod's own parent is not a bound — but a
parent that names a pod uid ("pod<uid>", the kubelet's pod cgroup) must name this pod's: another pod's
cgroup is that pod's, and a plugin moving a pod there answered for the wrong pod.

Whose keys: the kubelet's own labels and annotations (`io.kubernetes.*`: the pod's name, namespace and
uid it lists sandboxes by, a container's hash, restart count, termination message settings, ...; also
cri-dockerd's `io.kubernetes.docker.type`, `io.kubernetes.sandbox.id`) are not a plugin's to change. A
plugin may echo them; an answer giving one a new value (another pod's uid, another container's hash) is
refused. The answers carry no pod metadata of their own, so these keys and the cgroup parent are the
identity an answer can get wrong.

Sizes: what an answer adds is bounded far below what the runtime and the kubelet accept (one gRPC
message of 16 MiB: a ListPodSandbox carries every pod's labels and annotations), with Kubernetes' own
limits as the guide, so one plugin cannot make the node's listings, the container's exec or the store's
rebuild fail. Per value: a label value is at most a Kubernetes label value's 63 characters; an env entry
"NAME=value" fits Linux's MAX_ARG_STRLEN (longer ones fail exec with E2BIG); a cpu list or a cgroup v2
value fits the one page the kernel reads from a cgroup file write; a cgroup parent fits PATH_MAX. Per map:
annotations (keys and values) stay within Kubernetes' 256 KiB per object, and no map grows by more than
ANSWER_MAP_MAX_BYTES. The whole answer adds at most ANSWER_MAX_ADDED_BYTES. Only growth is counted: what the
kubelet sent, however large, is never the plugin's fault.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from google.protobuf.message import Message

from runtimeproxy.hooks.trace import clip
from runtimeproxy.hooks.merge import SWAP_UNLIMITED, SWAP_UNSET, merge_container_response, merge_pod_response
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
# Text a plugin chose (an error, an eviction reason) as logs, status, the trace and the kubelet keep it.
PLUGIN_TEXT_MAX_CHARS = 1024
PLUGIN_NAME_MAX_CHARS = 128  # an NRI plugin's registered name: a toggle name, a metric label
# What a terminal or a log line must not get raw: C0 and C1 controls (newlines, ESC, CSI), DEL, line and
# paragraph separators and the bidirectional overrides that reorder what is shown.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")

KiB = 1024
# Kubernetes' bound on all annotations of one object, keys and values (TotalAnnotationSizeLimitB).
ANNOTATIONS_MAX_BYTES = 256 * KiB
# A Kubernetes label value's length (the API server's rule for the pod's own labels).
LABEL_VALUE_MAX_CHARS = 63
# Linux MAX_ARG_STRLEN (32 pages): one "NAME=value" string of exec's environment, with its NUL; over it, E2BIG.
ENV_ENTRY_MAX_BYTES = 128 * KiB
# One page: what the kernel takes from one write to a cgroup file (a cpuset list, a cgroup v2 value).
CGROUP_VALUE_MAX_BYTES = 4 * KiB
CGROUP_PATH_MAX_BYTES = 4 * KiB  # PATH_MAX
# What one answer may add to one map (new or changed keys and values), and to all of them together:
# 1/64 and 1/32 of the 16 MiB message that the kubelet's CRI client and containerd accept.
ANSWER_MAP_MAX_BYTES = 256 * KiB
ANSWER_MAX_ADDED_BYTES = 512 * KiB
# Keys the kubelet (and cri-dockerd, containerd's CRI) own on sandboxes and containers.
KUBELET_KEY_PREFIX = "io.kubernetes."

_CPU_LIST = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")
_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_SLICE_NAME = re.compile(r"[A-Za-z0-9_.\\]+(-[A-Za-z0-9_.\\]+)*\.slice")
_SLICE_SUFFIX = ".slice"
# The kubelet's pod cgroup: "pod<uid>" as a path element, or "-pod<uid with '_' for '-'>.slice" (systemd).
# A uid is a UUID, or 32 hex digits (a static pod's).
_HEX_UID = r"[0-9a-fA-F]{8}[-_]?[0-9a-fA-F]{4}[-_]?[0-9a-fA-F]{4}[-_]?[0-9a-fA-F]{4}[-_]?[0-9a-fA-F]{12}"
_POD_CGROUP = re.compile(rf"(?:^|[/-])pod({_HEX_UID})(?=$|/|\.slice)")


@dataclass(frozen=True)
class Problem:
    field: str  # the response field, e.g. "container_resources.cpuset_cpus" or 'container_envs["A=B"]'
    reason: str
    # The fields whose values make the problem, as hooks.changes names them (a relation names two): who set them
    # last is blamed (hooks.chain). Empty: `field` alone.
    fields: tuple[str, ...] = ()

    @property
    def related(self) -> tuple[str, ...]:
        return self.fields or (self.field,)

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


def quoted(value: str) -> str:
    """A value as it appears in a message: JSON-quoted (NUL shows as \\u0000), long ones cut."""
    text = json.dumps(value)
    return text if len(text) <= _QUOTED_MAX_CHARS else text[: _QUOTED_MAX_CHARS - 4] + '..."'


def printable(text: str, limit: int = PLUGIN_TEXT_MAX_CHARS) -> str:
    """Text a plugin chose, as every log line, status, trace and CRI error shows it: controls escaped (`\\n`,
    `\\x1b`, `\\u202e`: it cannot start a log line or move a terminal's cursor) and cut to `limit` characters,
    as quoted() cuts a value. The one function for such text: applying it twice changes nothing."""
    cut = text[:limit + 1]  # one more than fits: a longer text is clipped, never read whole
    if _UNPRINTABLE.search(cut):
        cut = _UNPRINTABLE.sub(_escaped, cut)
    return clip(cut, limit)


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return _SHORT_ESCAPES.get(code) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


_SHORT_ESCAPES = {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}


# --- rules, one per kind of value ------------------------------------------------------------


def nul_problem(value: str) -> str | None:
    return f"{quoted(value)} contains a NUL byte" if "\0" in value else None


def cpu_list_problem(value: str) -> str | None:
    """Linux list format ("0-3,8,10-11"); empty means "keep" to the runtime and is fine."""
    if not value:
        return None
    if len(value) > CGROUP_VALUE_MAX_BYTES:
        return f"{quoted(value)} is {len(value)} bytes, over {CGROUP_VALUE_MAX_BYTES} (one cgroup file write)"
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


def env_entry_problem(name: str, value: str) -> str | None:
    size = len(name.encode()) + len(value.encode()) + 2  # "NAME=value" and its NUL
    if size > ENV_ENTRY_MAX_BYTES:
        return (f"the variable is {size} bytes as NAME=value with its NUL, over {ENV_ENTRY_MAX_BYTES} (Linux's "
                "MAX_ARG_STRLEN: exec would fail with E2BIG)")
    return None


def label_value_problem(value: str) -> str | None:
    """At most Kubernetes' 63 characters. Not its charset: nothing on the node selects by a pod's own label
    values (the kubelet lists sandboxes by io.kubernetes.pod.uid; containerd takes any string)."""
    if len(value) > LABEL_VALUE_MAX_CHARS:
        return f"{quoted(value)} is {len(value)} characters, over {LABEL_VALUE_MAX_CHARS} (a Kubernetes label value)"
    return nul_problem(value)


def cgroup_value_problem(value: str) -> str | None:
    if len(value.encode()) > CGROUP_VALUE_MAX_BYTES:
        return f"the value is {len(value.encode())} bytes, over {CGROUP_VALUE_MAX_BYTES} (one cgroup file write)"
    return nul_problem(value)


def kubelet_key_problem(key: str, current: Mapping[str, str]) -> str | None:
    """A changed value of a key the kubelet owns (io.kubernetes.*): echoing it is the only thing allowed."""
    if not key.startswith(KUBELET_KEY_PREFIX):
        return None
    if key not in current:
        return f"{quoted(key)} is the kubelet's key ({KUBELET_KEY_PREFIX}*), not a plugin's to add"
    return (f"{quoted(key)} is the kubelet's key ({KUBELET_KEY_PREFIX}*): a plugin may echo {quoted(current[key])}, "
            "not change it (an answer for another pod or container?)")


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
    if len(path.encode()) >= CGROUP_PATH_MAX_BYTES:
        return f"{quoted(path)} is {len(path.encode())} bytes, not under {CGROUP_PATH_MAX_BYTES} (PATH_MAX)"
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


def pod_uids_in_cgroup(parent: str) -> set[str]:
    """The pod uids a cgroup path names ("pod<uid>" elements), normalised: lower case, no '-' or '_'."""
    return {_normal_uid(uid) for uid in _POD_CGROUP.findall(parent)}


def _normal_uid(uid: str) -> str:
    return uid.lower().replace("-", "").replace("_", "")


def _other_pod_problem(value: str, current: str, pod_uid: str) -> str | None:
    """A parent naming a pod cgroup that is not this pod's (its uid from the request, else its parent)."""
    named = pod_uids_in_cgroup(value)
    ours = {_normal_uid(pod_uid)} if pod_uid else pod_uids_in_cgroup(current)
    if not named or not ours or named & ours:
        return None
    return (f"{quoted(value)} is the cgroup of another pod (uid {sorted(named)[0]}), not of this pod "
            f"({pod_uid or sorted(ours)[0]}): an answer for another pod?")


def cgroup_parent_problem(value: str, current: str, pod_uid: str = "") -> str | None:
    """A new cgroup parent for a pod whose parent is `current` (empty: the runtime's default) and whose uid
    is `pod_uid` (empty: unknown)."""
    if problem := nul_problem(value):
        return problem
    if ":" in value:
        return (f"{quoted(value)}: the \"slice:prefix:name\" form is containerd's to build; "
                "give a path or a slice name")
    problem = _parent_syntax_problem(value) or _other_pod_problem(value, current, pod_uid)
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


def map_bytes(entries: Mapping[str, str]) -> int:
    """Keys and values, UTF-8, as Kubernetes counts an object's annotations."""
    return sum(len(key.encode()) + len(value.encode()) for key, value in entries.items())


def added_bytes(current: Mapping[str, str], answer: Mapping[str, str]) -> int:
    """What an answer adds to a map: its new and changed entries, keys and values."""
    return map_bytes(dict(_changed(current, answer)))


Rule = Callable[[str], "str | None"]
EntryRule = Callable[[str, str], "str | None"]


@dataclass(frozen=True)
class MapRules:
    key: Rule
    value: Rule = nul_problem
    entry: EntryRule | None = None
    kubelet_keys: bool = False  # io.kubernetes.* keys are the kubelet's
    total_max_bytes: int | None = None  # the merged map's bound (annotations: Kubernetes' per object)


LABELS = MapRules(label_key_problem, label_value_problem, kubelet_keys=True)
ANNOTATIONS = MapRules(annotation_key_problem, kubelet_keys=True, total_max_bytes=ANNOTATIONS_MAX_BYTES)
ENVS = MapRules(env_name_problem, entry=lambda name, value: nul_problem(value) or env_entry_problem(name, value))
UNIFIED = MapRules(unified_key_problem, cgroup_value_problem)


def _entry_problem(rules: MapRules, key: str, value: str) -> str | None:
    return rules.key(key) or (rules.entry(key, value) if rules.entry else rules.value(value))


def _entry_field(field: str, key: str) -> tuple[str, str]:
    """An entry's field as a message shows it (the key quoted, cut) and as hooks.changes names it (whole)."""
    return f"{field}[{quoted(key)}]", f"{field}[{json.dumps(key)}]"


def _map_values_problem(field: str, before: Mapping[str, str], after: Mapping[str, str],
                        rules: MapRules) -> Problem | None:
    """The entries `after` has that `before` had not (or had with another value), and the map's total."""
    changed = _changed(before, after)
    for key, value in changed:
        if reason := _entry_problem(rules, key, value):
            shown, named = _entry_field(field, key)
            return Problem(shown, reason, (named,))
    if rules.total_max_bytes is not None and changed:
        size_before, size_after = map_bytes(before), map_bytes(after)
        if size_after > rules.total_max_bytes and size_after > size_before:  # never the kubelet's size
            return Problem(field, f"would be {size_after} bytes of keys and values, over {rules.total_max_bytes} "
                                  "(Kubernetes' limit for one object)")
    return None


def _map_answer_problem(field: str, current: Mapping[str, str], answer: Mapping[str, str],
                        rules: MapRules) -> Problem | None:
    """What one answer does to one map, judged on the answer: a kubelet key given a new value, its growth."""
    changed = _changed(current, answer)
    if rules.kubelet_keys:
        for key, _ in changed:
            if reason := kubelet_key_problem(key, current):
                shown, named = _entry_field(field, key)
                return Problem(shown, reason, (named,))
    added = map_bytes(dict(changed))
    if added > ANSWER_MAP_MAX_BYTES:
        return Problem(field, f"the answer adds {added} bytes of keys and values, over {ANSWER_MAP_MAX_BYTES}")
    return None


def _answer_size_problem(response: Message, added: int) -> Problem | None:
    if added <= ANSWER_MAX_ADDED_BYTES:
        return None
    return Problem(response.DESCRIPTOR.name,
                   f"the answer adds {added} bytes of keys and values in all, over {ANSWER_MAX_ADDED_BYTES}")


def swap_problem(memory: int, swap: int) -> str | None:
    """memory_swap_limit_in_bytes is memory + swap: below the memory limit runc and dockerd refuse it."""
    if memory <= 0 or swap in (SWAP_UNSET, SWAP_UNLIMITED) or swap >= memory:
        return None
    return (f"the swap limit (memory + swap) would be {swap}, below the memory limit {memory}; it must be at "
            f"least the memory limit, {SWAP_UNSET} (unset) or {SWAP_UNLIMITED} (unlimited)")


def _memory_swap_problem(field: str, before: hooks.LinuxContainerResources,
                         after: hooks.LinuxContainerResources) -> Problem | None:
    """Memory and swap as they are left: a relation of two fields (Problem.fields names both), named by the swap
    field if it changed, else by the memory field."""
    memory, swap = after.memory_limit_in_bytes, after.memory_swap_limit_in_bytes
    swap_changed = swap != before.memory_swap_limit_in_bytes
    if not (swap_changed or memory != before.memory_limit_in_bytes):
        return None
    reason = swap_problem(memory, swap)
    if reason is None:
        return None
    fields = (f"{field}.memory_swap_limit_in_bytes", f"{field}.memory_limit_in_bytes")
    return Problem(fields[0] if swap_changed else fields[1], reason, fields)


def resources_problem(field: str, before: hooks.LinuxContainerResources,
                      after: hooks.LinuxContainerResources) -> Problem | None:
    """The resources as they are left, where they differ from `before`: the values merge_resources takes (sizes and
    CPU values when > 0, quota when != 0, the rest always), memory against swap, the unified keys."""
    checks: list[tuple[str, bool, str | None]] = [
        ("cpu_period", after.cpu_period > 0, cpu_period_problem(after.cpu_period)),
        ("cpu_quota", after.cpu_quota != 0, cpu_quota_problem(after.cpu_quota)),
        ("cpu_shares", after.cpu_shares > 0, cpu_shares_problem(after.cpu_shares)),
        ("oom_score_adj", True, oom_score_adj_problem(after.oom_score_adj)),
        ("cpuset_cpus", True, cpu_list_problem(after.cpuset_cpus)),
        ("cpuset_mems", True, cpu_list_problem(after.cpuset_mems)),
    ]
    for name, taken, reason in checks:
        if taken and reason and getattr(after, name) != getattr(before, name):
            return Problem(f"{field}.{name}", reason)
    return (_memory_swap_problem(field, before, after)
            or _map_values_problem(f"{field}.unified", before.unified, after.unified, UNIFIED))


def _cgroup_parent_change_problem(field: str, before: str, after: str, pod_uid: str) -> Problem | None:
    if not after or after == before:  # the merge takes only a non-empty parent
        return None
    reason = cgroup_parent_problem(after, before, pod_uid)
    return Problem(field, reason) if reason else None


def _other_pod_parent_problem(field: str, current: str, answer: str, pod_uid: str) -> Problem | None:
    if not answer or answer == current:
        return None
    reason = _other_pod_problem(answer, current, pod_uid)
    return Problem(field, reason) if reason else None


@dataclass(frozen=True)
class _Layout:
    """Where a hook message (request or response, same names) has what validation reads."""

    parent: str
    resources: str
    maps: tuple[tuple[str, MapRules], ...]


_POD = _Layout("cgroup_parent", "resources", (("labels", LABELS), ("annotations", ANNOTATIONS)))
_CONTAINER = _Layout("pod_cgroup_parent", "container_resources",
                     (("container_envs", ENVS), ("container_annotations", ANNOTATIONS)))
_LAYOUTS: dict[type[Message], _Layout] = {
    hooks.PodSandboxHookResponse: _POD, hooks.PodSandboxHookRequest: _POD,
    hooks.ContainerResourceHookResponse: _CONTAINER, hooks.ContainerResourceHookRequest: _CONTAINER,
}


# --- per answer, before it is folded: what only the answer itself shows ------------------------


def answer_only_problem(request: Message, response: Message) -> Problem | None:
    """The first problem one pre-hook answer shows by itself, judged before it is folded (and never again): an
    answer for another pod or container (a kubelet key given a new value, another pod's cgroup), or one adding too
    much (per map, in all)."""
    layout = _LAYOUTS.get(type(response))
    if layout is None:
        return None
    uid = request.pod_meta.uid  # type: ignore[attr-defined]
    problem = _other_pod_parent_problem(layout.parent, getattr(request, layout.parent),
                                        getattr(response, layout.parent), uid)
    unified = f"{layout.resources}.unified"
    maps = ((unified, getattr(request, layout.resources).unified, getattr(response, layout.resources).unified,
             UNIFIED),
            *((name, getattr(request, name), getattr(response, name), rules) for name, rules in layout.maps))
    for name, current, answer, rules in maps:
        problem = problem or _map_answer_problem(name, current, answer, rules)
    return problem or _answer_size_problem(response, sum(added_bytes(current, answer)
                                                         for _, current, answer, _ in maps))


# --- once over a chain's result: the values every plugin left, and how they relate -----------------


def result_problem(original: Message, result: Message) -> Problem | None:
    """The first problem of a request as the plugins left it, in what differs from `original` (as the kubelet
    sent it): each value by its rule, memory against swap, the annotations' total. None: safe to apply."""
    layout = _LAYOUTS.get(type(result))
    if layout is None:
        return None
    uid = original.pod_meta.uid  # type: ignore[attr-defined]
    problem = (_cgroup_parent_change_problem(layout.parent, getattr(original, layout.parent),
                                             getattr(result, layout.parent), uid)
               or resources_problem(layout.resources, getattr(original, layout.resources),
                                    getattr(result, layout.resources)))
    for name, rules in layout.maps:
        problem = problem or _map_values_problem(name, getattr(original, name), getattr(result, name), rules)
    return problem


def answer_problem(request: Message, response: Message) -> Problem | None:
    """The first problem of one pre-hook answer alone: what it shows by itself, then the request it would leave
    (for an answer judged on its own: in shadow, `runtimeproxyctl try-plugin`)."""
    problem = answer_only_problem(request, response)
    if problem is not None:
        return problem
    if isinstance(response, hooks.PodSandboxHookResponse):
        return result_problem(request, merge_pod_response(request, response))  # type: ignore[arg-type]
    if isinstance(response, hooks.ContainerResourceHookResponse):
        return result_problem(request, merge_container_response(request, response))  # type: ignore[arg-type]
    return None
