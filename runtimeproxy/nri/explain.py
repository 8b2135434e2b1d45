"""One NRI event's plugin calls, explained the way the hook core explains a hook chain (issue 21: one core).

`EventRecord` wraps hooks.chain.ChainRecord and records each step through the core's one chain step
(hooks.step.KindSteps, NRI's row of hooks.kinds), so an NRI event lands in the same per-pod trace
(`runtimeproxyctl trace`) as the hook plugins' calls, entry shape and bounds included: per plugin, under its
toggle name (`nri:10-name`), a step (ok; failed with the NRI code, or `detached` for a timeout or a broken
connection; refused with `conflict`, `refused` or `invalid` and the reason; in shadow; skipped: toggled off, as a
hook plugin whose hook is off, with the toggle's reason), its latency, the
fields its adjustment or update changed in the container (hooks.changes, `before -> after`; the argv, bind
mounts, devices and RDT class, which the hook model lacks, in words), what a plugin in shadow would have changed, and in words its requests to update or evict other containers. `finish` counts
the shadow outcomes in the host's statistics and keeps the entry. An adjusting event of a call whose hook plugins
ran (CreateContainer, UpdateContainer) records into the hook chain's record instead, which the hook point
finishes: one entry for the kubelet's call, both kinds' steps in it (hooks.step). Field changes are only computed when read:
the trace is on, a plugin is in shadow, a second plugin changed the container, or the result failed validation
(`settle`, which the host calls after the last plugin: the chain's one validation). The statistics count each call under the plugin's id and the event.
"""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.message import Message

from runtimeproxy.hooks.chain import ChainRecord, Refusal, Result
from runtimeproxy.hooks.changes import show
from runtimeproxy.hooks.edits import LINUX_KINDS, ContainerEdits, Rlimit
from runtimeproxy.hooks.nri_plugins import Subject
from runtimeproxy.hooks.kinds import NRI
from runtimeproxy.hooks.hook_messages import container_request, pod_request
from runtimeproxy.hooks.step import KindSteps
from runtimeproxy.hooks.trace import Step, pod_key
from runtimeproxy.hooks.validate import printable
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

# Outcomes (hooks.stats, nri_calls_total) that are a refusal of the answer rather than a failed call.
REFUSALS = frozenset({"conflict", "refused", "invalid"})
NOTIFIED = "notification: the call is unaffected"
SENT = "sent to the runtime"


def trace_name(plugin_id: str) -> str:
    """How the trace names an NRI plugin: its toggle name, the name `shadow` and `disable` take."""
    return NRI.toggle_name(plugin_id)


def hook_name(event: str) -> str:
    """The trace's hook column for an NRI event ("NRI CreateContainer"), beside the hook points' names."""
    return NRI.trace_hook(event)


SHOWN_ID_CHARS = 80  # a container ID a plugin named (64 hex digits when it names a real one)
SHOWN_REASON_CHARS = 256  # an eviction's reason, in a log line or beside others in a trace step


def shown_id(container_id: str) -> str:
    """A container ID a plugin sent, as a log line shows it (it may name no container, and hold anything)."""
    return printable(container_id, SHOWN_ID_CHARS)


def shown_reason(eviction: nri.ContainerEviction) -> str:
    return printable(eviction.reason or "no reason given", SHOWN_REASON_CHARS)


EXAMPLES_SHOWN = 3  # a log line about many containers names this many


def some_ids(container_ids: Sequence[str]) -> str:
    """A few of many IDs a plugin named, for one log line: "a, b, c and 99997 more"."""
    shown = ", ".join(shown_id(container_id) for container_id in container_ids[:EXAMPLES_SHOWN])
    more = len(container_ids) - EXAMPLES_SHOWN
    return f"{shown} and {more} more" if more > 0 else shown


def asked_of_others(updates: Sequence[nri.ContainerUpdate], evictions: Sequence[nri.ContainerEviction],
                    shadow: bool) -> list[str]:
    """A plugin's requests about other containers, in words (the trace's step details)."""
    verb = "would " if shadow else ""
    notes = [f"{verb}update container {shown_id(update.container_id[:13])}" for update in updates]
    notes += [f"{verb}evict container {shown_id(eviction.container_id[:13])} ({shown_reason(eviction)})"
              for eviction in evictions]
    if shadow and notes:
        notes.append("in shadow: not carried out")
    return notes


def edit_changes(before: ContainerEdits | None, after: ContainerEdits | None, shadow: bool) -> list[str]:
    """What a plugin changed of the argv, bind mounts, devices, RDT class and Linux settings, in words (step
    details)."""
    if before is None or after is None or before == after:
        return []
    verb = "would " if shadow else ""
    notes = []
    if after.args != before.args:
        notes.append(f"{verb}set args {show(list(before.args))} -> {show(list(after.args))}")
    notes += [f"{verb}remove mount {mount.destination}" for mount in before.mounts if mount not in after.mounts]
    notes += [f"{verb}mount {mount.source} at {mount.destination}{' (ro)' if mount.readonly else ''}"
              for mount in after.mounts if mount not in before.mounts]
    notes += [f"{verb}remove device {device.path}" for device in before.devices if device not in after.devices]
    notes += [f"{verb}add device {device.path} ({device.permissions})" for device in after.devices
              if device not in before.devices]
    if after.rdt_class != before.rdt_class:
        notes.append(f"{verb}set RDT class {show(before.rdt_class or '')} -> {show(after.rdt_class or '')}")
    for kind in sorted(LINUX_KINDS):
        old, new = getattr(before, kind), getattr(after, kind)
        if new != old:
            notes.append(f"{verb}set {kind.replace('_', ' ')} {show(_plain(old))} -> {show(_plain(new))}")
    return notes


def _plain(value: object) -> object:
    """A Linux setting as the trace shows it: rlimits as type=soft:hard, sysctls as a map, None as ""."""
    if value is None:
        return ""
    if isinstance(value, tuple):
        return [f"{item.type}={item.soft}:{item.hard}" if isinstance(item, Rlimit) else "=".join(item)
                for item in value]
    return value


def traced_request(subject: Subject) -> Message | None:
    """The hook request an event's subject is traced as (the pod's trace it belongs to reads its pod part): its
    container's with its pod's part, else its pod's."""
    container, pod = subject.container, subject.pod
    if container is None:
        return pod_request(pod) if pod is not None else None
    return container_request(container, pod)


class EventRecord:
    def __init__(self, event: str, subject: Subject, steps: KindSteps, chain: ChainRecord | None = None,
                 request: Message | None = None) -> None:
        """The event's subject is traced as its request: `request` (an adjusting event's value, as the hook
        plugins left it), else the container with its pod's part, else the pod. `chain`: the kubelet call's
        record, into which the steps go (its owner finishes it)."""
        self.event = event
        self._steps = steps
        self._owned = chain is None
        if chain is not None:
            self._chain = chain
            return
        traced = steps.trace.enabled and (subject.container is not None or subject.pod is not None)
        if request is None and traced:
            request = traced_request(subject)
        self._chain = steps.record(event, request if request is not None else nri.Empty(), traced)

    @property
    def traced(self) -> bool:
        return self._chain.traced

    def toggled_off(self, plugin_id: str) -> bool:
        """Off by the node's toggles: not called, and (traced) shown skipped with the toggle's reason."""
        return self._steps.toggled_off(self._chain, plugin_id, self.event)

    def ok(self, plugin_id: str, started: float, shadow: bool, notes: Sequence[str] = ()) -> None:
        self._steps.ok(self._chain, plugin_id, self.event, started, shadow, "; ".join(notes))

    def failed(self, plugin_id: str, started: float, shadow: bool, outcome: str, message: str) -> None:
        """`outcome` as the statistics count it (an NRI code, "detached", or one of REFUSALS)."""
        self._steps.failed(self._chain, plugin_id, self.event, started, shadow, outcome, message,
                           refused=outcome in REFUSALS)

    def changed(self, plugin_id: str, before: Message, after: Message, shadow: bool,
                refuse: Refusal | None = None) -> None:
        """The last ok step (of `plugin_id`) left the container `after` (in shadow: would have); `refuse`: how the
        result's validation refuses it (hooks.chain)."""
        if shadow:
            self._steps.shadowed(self._chain, plugin_id, self.event, before, after)
        elif after != before:
            self._chain.applied(before, after, refuse)

    def refused(self, step: Step, plugin_id: str, outcome: str, message: str) -> None:
        """An ok step's answer refused by the chain's result (one of REFUSALS)."""
        self._steps.refused(step, plugin_id, self.event, outcome, message)

    def settle(self, final: Result) -> Result:
        """The chain's result validated once, after its last plugin (hooks.chain.ChainRecord.settle)."""
        return self._chain.settle(final)

    def finish(self, final: Message | None, result: str, written_back: bool = False) -> None:
        """Shadow outcomes counted; the entry kept in the pod's trace (a pod known by uid or name only). Nothing
        for a record of the kubelet call's chain: its owner finishes it."""
        if not self._owned:
            return
        final = final if final is not None else self._chain.original
        if self._chain.traced:
            who = pod_key(self._chain.original)
            self._chain.traced = bool(self._chain.steps) and bool(who.uid or who.name)
        self._steps.finish(self._chain, self.event, final, result, written_back)
