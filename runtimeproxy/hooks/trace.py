"""The per-pod decision trace: what each hooked call of a pod went through, plugin by plugin.

For every call that runs a chain (hooks.dispatcher) one `TraceEntry` is kept: the time, the hook point,
the request as it came (one compact line), then per plugin in chain order its outcome (ok, skipped by a
toggle or the skip label, failed with a code, refused by validation and why, and whether it ran in
shadow), its latency and the fields it changed (path, before -> after; a shadow's are what it *would*
have changed), the collisions between plugins of the chain, and what went to the runtime.

In memory only, bounded (the numbers are the constants below, stated in docs/operating.md): a ring of
`entries_per_pod` entries per pod, at most `MAX_TRACED_PODS` pods (the least recently traced pod is
evicted first), a pod's trace dropped when the pod is removed. A proxy restart starts it empty. Calls
nobody hooks never reach here: the unhooked path costs nothing. Knows no transport.

Pods are keyed by uid (namespace/name when a request has none); sandbox and container IDs are aliases
learned as the pod's calls go by, so `runtimeproxyctl trace` finds a pod by any of them.
"""

from __future__ import annotations

import collections
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from google.protobuf.message import Message

from runtimeproxy.hooks.changes import UNSET, FieldChange, show
from runtimeproxy.hooks.model import ContainerRecord, PodRecord
from runtimeproxy.options import DEFAULT_HOOK_TRACE_ENTRIES

# A ring of this many entries per pod (--hook-trace-entries; 0: no trace).
DEFAULT_ENTRIES_PER_POD = DEFAULT_HOOK_TRACE_ENTRIES
# Pods traced at once; one more evicts the least recently traced (a node runs at most 110 by default).
MAX_TRACED_PODS = 256
# Container IDs remembered per pod (restarts add IDs), the oldest forgotten first.
MAX_CONTAINER_IDS_PER_POD = 64
# What one entry keeps, whatever the request: its compact line, each value shown, the changes per step.
MAX_REQUEST_CHARS = 400
MAX_VALUE_CHARS = 160
MAX_CHANGES_PER_STEP = 64
MAX_KEPT_REQUEST_BYTES = 4096  # a bigger request is kept as its compact line (MAX_REQUEST_CHARS)

SHORT_ID_CHARS = 13  # as crictl and docker show IDs

# Step outcomes.
OK = "ok"
FAILED = "failed"  # the call brought no answer, or an undecodable one (code says which)
REFUSED = "refused"  # the answer decoded but validation refused it (details say why)
SKIPPED_TOGGLE = "skipped: toggled off"
SKIPPED_LABEL = "skipped: skip label"

_MAP_KEY = re.compile(r'\["(?:[^"\\]|\\.)*"\]')


def field_family(path: str) -> str:
    """A field path with map keys collapsed (`container_envs["A"]` -> `container_envs[*]`): a bounded label."""
    return _MAP_KEY.sub("[*]", path)


def clip(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def shown(value: object) -> str:
    """A traced value as the trace shows it (read time: recording keeps the value itself)."""
    return clip(show(value))


def bounded_changes(changes: Sequence[FieldChange]) -> tuple[FieldChange, ...]:
    """At most MAX_CHANGES_PER_STEP changes, long strings clipped: what one step may keep in memory."""
    kept = tuple(_bounded(change) for change in changes[:MAX_CHANGES_PER_STEP])
    if len(changes) > MAX_CHANGES_PER_STEP:
        kept += (FieldChange(f"(and {len(changes) - MAX_CHANGES_PER_STEP} more fields)", UNSET, UNSET),)
    return kept


def _bounded(change: FieldChange) -> FieldChange:
    before, after = change.before, change.after
    if (isinstance(before, str) and len(before) > MAX_VALUE_CHARS) or (
            isinstance(after, str) and len(after) > MAX_VALUE_CHARS) or isinstance(before, list) or isinstance(
            after, list):
        return FieldChange(change.field, _bounded_value(before), _bounded_value(after))
    return change


def _bounded_value(value: object) -> object:
    if isinstance(value, str):
        return clip(value)
    if isinstance(value, list):
        return clip(show(value))  # repeated fields (hugepage limits) are rare: shown now
    return value


@dataclass(frozen=True)
class Collision:
    """Two plugins of one chain set the same field to different values: the later one's value stands."""

    field: str
    earlier_plugin: str
    earlier_value: object
    later_plugin: str
    later_value: object

    def __str__(self) -> str:
        return (f"{self.field}: {self.earlier_plugin} set {shown(self.earlier_value)}, {self.later_plugin} set "
                f"{shown(self.later_value)} (the later plugin wins)")


@dataclass
class Step:
    """One plugin's part in one call."""

    plugin: str
    outcome: str
    shadow: bool = False
    code: str = ""  # the gRPC code of a failure or refusal
    details: str = ""
    seconds: float = 0.0
    changes: tuple[FieldChange, ...] = ()  # applied (or, in shadow, what would have been)
    disagreements: tuple[FieldChange, ...] = ()  # shadow only: field: applied value -> the shadow's


@dataclass
class TraceEntry:
    unix_seconds: float
    hook: str
    target: str  # "pod" or "container app (0123456789ab)"
    # The request as it came: its bytes (made into a compact line when read), or the line itself for a big one.
    request: bytes | str
    request_type: type[Message] | None = None
    steps: list[Step] = field(default_factory=list)
    collisions: tuple[Collision, ...] = ()
    result: str = ""  # what went to the runtime, in words
    sent_changes: tuple[FieldChange, ...] = ()  # the chain's changes as the frontend writes them back

    def request_line(self) -> str:
        if isinstance(self.request, str) or self.request_type is None:
            return str(self.request)
        return compact(self.request_type.FromString(self.request))


def kept_request(request: Message) -> bytes | str:
    """What an entry keeps of its request: the bytes of a small one (cheap now, rendered when read), else the
    compact line (bounded)."""
    if request.ByteSize() <= MAX_KEPT_REQUEST_BYTES:
        return request.SerializeToString()
    return compact(request)


def compact(message: Message, limit: int = MAX_REQUEST_CHARS) -> str:
    """A message on one line, set fields only; maps of more than a few entries shown by their size."""
    return clip(_compact(message), limit)


_MAP_ENTRIES_SHOWN = 3


def _compact(message: Message) -> str:
    parts = []
    for descriptor, value in message.ListFields():
        name = descriptor.name
        if descriptor.message_type is not None and descriptor.message_type.GetOptions().map_entry:
            if len(value) > _MAP_ENTRIES_SHOWN:
                parts.append(f"{name}{{{len(value)} entries}}")
            else:
                parts.append(f"{name}{{" + ", ".join(f"{k}={clip(str(v), 40)}" for k, v in sorted(value.items()))
                             + "}")
        elif descriptor.message_type is not None:
            if descriptor.is_repeated:
                parts.append(f"{name}[" + ", ".join(_compact(item) for item in value) + "]")
            else:
                parts.append(f"{name}{{{_compact(value)}}}")
        else:
            parts.append(f"{name}={clip(show(value), 60)}")
    return " ".join(parts)


@dataclass(frozen=True)
class PodKey:
    """Who a call is about (read from its hook request: pod_key, or from the records: model_key)."""

    uid: str
    namespace: str
    name: str
    container_id: str = ""
    container_name: str = ""

    @property
    def key(self) -> str:
        return self.uid or f"{self.namespace}/{self.name}"

    @property
    def target(self) -> str:
        """What the call was about, within its pod's trace."""
        if not (self.container_name or self.container_id):
            return "pod"
        short = f" ({self.container_id[:SHORT_ID_CHARS]})" if self.container_id else ""
        return f"container {self.container_name or '?'}{short}"


def pod_key(request: Message) -> PodKey:
    meta = request.pod_meta  # type: ignore[attr-defined]  # both hook request types have it
    container = getattr(request, "container_meta", None)
    return PodKey(meta.uid, meta.namespace, meta.name,
                  container.id if container is not None else "", container.name if container is not None else "")


def model_key(pod: PodRecord, container: ContainerRecord | None = None) -> PodKey:
    """Who a pod or a container is, read from the core's records."""
    if container is None:
        return PodKey(pod.uid, pod.namespace, pod.name)
    return PodKey(pod.uid, pod.namespace, pod.name, container.id, container.name)


@dataclass
class PodTrace:
    """One pod's ring of entries and the IDs it is known by."""

    uid: str
    namespace: str
    name: str
    entries: collections.deque[TraceEntry]
    sandbox_ids: list[str] = field(default_factory=list)
    containers: collections.OrderedDict[str, str] = field(default_factory=collections.OrderedDict)  # id -> name
    dropped: int = 0  # entries the ring pushed out

    def add(self, entry: TraceEntry) -> None:
        if len(self.entries) == self.entries.maxlen:
            self.dropped += 1
        self.entries.append(entry)


class TraceRecorder:
    """Every traced pod's ring; `enabled` is False with `--hook-trace-entries=0` (nothing recorded)."""

    def __init__(self, entries_per_pod: int = DEFAULT_ENTRIES_PER_POD, max_pods: int = MAX_TRACED_PODS) -> None:
        self.entries_per_pod = max(0, entries_per_pod)
        self.max_pods = max_pods
        self._pods: collections.OrderedDict[str, PodTrace] = collections.OrderedDict()
        self._aliases: dict[str, str] = {}  # sandbox or container ID -> pod key
        self.evicted_pods = 0

    @property
    def enabled(self) -> bool:
        return self.entries_per_pod > 0

    @property
    def pod_count(self) -> int:
        return len(self._pods)

    @property
    def entry_count(self) -> int:
        return sum(len(pod.entries) for pod in self._pods.values())

    # -- recording ---------------------------------------------------------------------------

    def record(self, who: PodKey, entry: TraceEntry) -> None:
        pod = self._pod(who)
        pod.add(entry)
        if who.container_id:
            self._learn_container(pod, who.key, who.container_id, who.container_name)

    def learn_sandbox(self, who: PodKey, sandbox_id: str) -> None:
        """The runtime created the pod under this ID (only pods already traced are followed)."""
        pod = self._pods.get(who.key)
        if pod is not None and sandbox_id and sandbox_id not in pod.sandbox_ids:
            pod.sandbox_ids.append(sandbox_id)
            self._aliases[sandbox_id] = who.key

    def learn_container(self, who: PodKey, container_id: str, sandbox_id: str = "") -> None:
        """The runtime created a container of a traced pod (whose sandbox ID is learned too, if new)."""
        pod = self._pods.get(who.key)
        if pod is None:
            return
        if container_id:
            self._learn_container(pod, who.key, container_id, who.container_name)
        if sandbox_id and sandbox_id not in pod.sandbox_ids:
            pod.sandbox_ids.append(sandbox_id)
            self._aliases[sandbox_id] = who.key

    def forget_pod(self, sandbox_id: str) -> None:
        """The pod was removed: its trace goes with it."""
        key = self._aliases.get(sandbox_id)
        if key is not None:
            self._drop(key)

    def _pod(self, who: PodKey) -> PodTrace:
        pod = self._pods.get(who.key)
        if pod is None:
            pod = self._pods[who.key] = PodTrace(who.uid, who.namespace, who.name,
                                                 collections.deque(maxlen=self.entries_per_pod))
            while len(self._pods) > self.max_pods:
                self._drop(next(iter(self._pods)))
                self.evicted_pods += 1
        else:
            self._pods.move_to_end(who.key)
        return pod

    def _learn_container(self, pod: PodTrace, key: str, container_id: str, name: str) -> None:
        if container_id in pod.containers:
            return
        pod.containers[container_id] = name
        self._aliases[container_id] = key
        while len(pod.containers) > MAX_CONTAINER_IDS_PER_POD:
            old, _ = pod.containers.popitem(last=False)
            self._aliases.pop(old, None)

    def _drop(self, key: str) -> None:
        pod = self._pods.pop(key, None)
        if pod is None:
            return
        for alias in (*pod.sandbox_ids, *pod.containers):
            self._aliases.pop(alias, None)

    # -- reading -----------------------------------------------------------------------------

    def find(self, query: str) -> PodTrace | None:
        """A pod by uid, namespace/name, sandbox or container ID, or a unique prefix of an ID (as crictl)."""
        query = query.strip()
        if not query:
            return None
        key = query if query in self._pods else self._aliases.get(query)
        if key is None and "/" not in query:
            key = self._by_name(query) or self._by_prefix(query)
        if key is None and "/" in query:
            namespace, _, name = query.partition("/")
            key = self._by_name(name, namespace)
        return self._pods.get(key) if key is not None else None

    def _by_name(self, name: str, namespace: str | None = None) -> str | None:
        found = [key for key, pod in self._pods.items()
                 if pod.name == name and (namespace is None or pod.namespace == namespace)]
        return found[-1] if found else None  # the most recently traced pod of that name

    def _by_prefix(self, prefix: str) -> str | None:
        keys = {key for alias, key in self._aliases.items() if alias.startswith(prefix)}
        keys |= {key for key in self._pods if key.startswith(prefix)}
        return keys.pop() if len(keys) == 1 else None

    def pods(self) -> Iterable[PodTrace]:
        return tuple(self._pods.values())


def now() -> float:
    return time.time()
