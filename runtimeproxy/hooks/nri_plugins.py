"""NRI plugins, the core's second plugin kind on the same lifecycle calls: the interface the core calls.

The core knows NRI as a plugin kind (its row in hooks.kinds) and by its events (hooks.nri_events); its wire is not
the core's: runtimeproxy.nri implements `NriPlugins` and the process (runtimeproxy.app) puts it on the
HookService; without it `NO_NRI_PLUGINS` costs one attribute read per call. The hook points (hooks.lifecycle)
call it after the hook-protocol chain, so the NRI plugins see the request as the hook plugins left it. Events are named as NRI names them; `adjust` is for those whose answers change the call (the
table's `adjusts`: CreateContainer, UpdateContainer), `notify` for the others. Both raise
hooks.dispatcher.HookFailed to fail the call (`notify` only for the table's `fails_call`: RunPodSandbox,
StartContainer, UpdatePodSandbox). `adjust` folds into the chain's value (hooks.chain_value): the
container in the core's model, at CreateContainer with what the hook model lacks (hooks.edits.ContainerEdits:
argv, bind mounts, devices, RDT class, as the frontend's request says), returned as the plugins left it.

For the operator pieces (status, metrics; read through the hook service): `statuses()` describes each
attached plugin in plain values; its calls per event are the NRI kind's rows of the core's one table
(hooks.stats, HookService.stats: keyed by plugin id and NRI event name). The node's toggles name such a plugin `toggle_name` (hooks.toggles.nri_toggle_name), and
its events as hooks.nri_events does (a toggle can turn one event of a plugin off).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from runtimeproxy.hooks.chain import ChainRecord
from runtimeproxy.hooks.chain_value import ContainerValue
from runtimeproxy.hooks.model import ContainerRecord, PodRecord, Resources


@dataclass(frozen=True)
class PodResize:
    """A pod's resources after an in-place resize, as CRI's UpdatePodSandboxResources gives them (None: unset)."""

    overhead: Resources | None
    resources: Resources | None


@dataclass
class Subject:
    """What an event is about: a pod, or a container and its pod, in the core's model (as the store records them;
    at CreateContainer the container being created, as the hook plugins left it)."""

    pod_id: str
    pod: PodRecord | None  # None: not known
    container_id: str = ""
    # The container (labels, state, pid, times, current resources; at CreateContainer its edits: what the hook
    # model lacks, None: not carried); None: a pod event.
    container: ContainerRecord | None = None
    resize: PodResize | None = None  # UpdatePodSandbox: the pod's resources as they are to be

    def value(self) -> ContainerValue:
        """The container as an adjusting event starts from when no hook plugin ran before: as recorded."""
        assert self.container is not None
        return ContainerValue(self.container, self.pod)


@dataclass(frozen=True)
class NriPluginStatus:
    """One attached plugin as `runtimeproxyctl status` shows it."""

    name: str  # the plugin's id in its protocol ("10-resource-policy")
    toggle_name: str  # the node's toggles name it so
    kind: str  # "connected" or "launched"
    events: tuple[str, ...]  # subscribed, in lifecycle order
    since_unix_seconds: float
    protocol_version: str = ""


class NriPlugins(Protocol):
    def statuses(self) -> list[NriPluginStatus]:
        """Every attached plugin, in the order they are called."""

    def wants(self, event: str) -> bool:
        """Some attached plugin subscribed to the event (cheap: checked before anything is looked up)."""

    def attached(self) -> bool:
        """Some plugin is attached (cheap): what only such plugins see (a pid, an image's argv) is read then."""

    async def adjust(self, event: str, subject: Subject, time_remaining: float | None,
                     chain: ChainRecord | None = None, value: ContainerValue | None = None) -> ContainerValue:
        """CreateContainer / UpdateContainer: `value` (the container as the hook plugins left it; None:
        `subject.value()`) as the NRI plugins leave it, validated; at CreateContainer its edits too. `chain`: the
        kubelet call's record (its hook plugins' steps), which the NRI plugins' steps join; the caller finishes it."""

    async def notify(self, event: str, subject: Subject) -> None:
        """Any other event; raises HookFailed only for the events that fail the call (hooks.nri_events)."""


class _NoNriPlugins:
    def statuses(self) -> list[NriPluginStatus]:
        return []

    def wants(self, event: str) -> bool:
        return False

    def attached(self) -> bool:
        return False

    async def adjust(self, event: str, subject: Subject, time_remaining: float | None,
                     chain: ChainRecord | None = None, value: ContainerValue | None = None) -> ContainerValue:
        return value if value is not None else subject.value()

    async def notify(self, event: str, subject: Subject) -> None:
        return None


NO_NRI_PLUGINS: NriPlugins = _NoNriPlugins()
