"""What an NRI plugin sees over a pod's life, as plain data two NRI runtimes' runs compare with: containerd's own NRI
(the reference) and the proxy hosting the same plugin.

A run is the Go stub plugin's event log (rplab.nri_stub: every message it got, under ``pod_full``,
``container_full``, ``resources_full``, ``pods_full``, ``containers_full``) plus the kubelet client's document
(rplab.kubelet: the container's OCI spec, running and after the resize). ``observed`` turns it into one view per
event (``event -> {"pod": ..., "container": ...}``) and two OCI-spec views, with what differs by nature masked: the IDs
the runtime chose, pids, times, the runtime's own directories (``roots``), the runtime's name and version.

``differences`` is every leaf where two views differ, keyed ``Event.field.path`` (a list is one leaf; a label or
annotation key is one segment), with both values: what a test's table of known differences is checked against.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rplab.differential import ABSENT, leaf_differences, placeheld
from rplab.differential import unexplained  # noqa: F401  (re-exported: the tests use it from here)

SPEC_VIEWS = {"OCI spec (running)": ("ContainerStatus", "running"),
              "OCI spec (resized)": ("ContainerStatus", "resized")}
# The plugin's records under these keys are the messages it got; the other keys repeat parts of them.
FULL_FIELDS = {"pod_full": "pod", "container_full": "container", "resources_full": "resources"}


@dataclass(frozen=True)
class NriRun:
    """One pod's life seen by the plugin: its records, the kubelet client's document, the runtime's directories."""

    records: list[dict[str, Any]]
    lifecycle: Mapping[str, Any]
    roots: tuple[str, ...] = ()
    pod: str = ""  # the pod whose life is compared event by event; "" for every record

    def followed(self, record: Mapping[str, Any]) -> bool:
        """A record of the compared pod's life, or of no pod (Configure, Synchronize)."""
        return not self.pod or record.get("pod") in (None, self.pod)

    def events(self) -> list[str]:
        """The events of the compared pod's life (and Configure, Synchronize), in order."""
        return [record["event"] for record in self.records if self.followed(record)]

    def other_events(self) -> list[str]:
        """``"<pod> <event>"`` for every event of another pod, in order."""
        return [f"{record.get('pod')} {record['event']}" for record in self.records if not self.followed(record)]

    def tokens(self) -> dict[str, str]:
        """The IDs this run's runtime chose, and its directories, each with its placeholder."""
        found: dict[str, str] = {root: "<root>" for root in self.roots}
        for record in self.records:
            pods = [record.get("pod_full") or {}, *(record.get("pods_full") or [])]
            ctrs = [record.get("container_full") or {}, *(record.get("containers_full") or [])]
            found.update({pod["id"]: f"<pod-id {pod.get('name')}>" for pod in pods if pod.get("id")})
            found.update({ctr["id"]: f"<container-id {ctr.get('name')}>" for ctr in ctrs if ctr.get("id")})
        return found


def _event_view(record: Mapping[str, Any]) -> dict[str, Any]:
    if record["event"] == "Configure":  # the runtime's name and version: by nature
        return {"config": record.get("config", "")}
    return {FULL_FIELDS[key]: value for key, value in record.items() if key in FULL_FIELDS}


def _synchronized(record: Mapping[str, Any]) -> dict[str, Any]:
    """Synchronize's pods and containers, one view each (``Synchronize(<name>)``), so their fields compare as an
    event's do; the view ``Synchronize`` keeps the names, sorted."""
    views: dict[str, Any] = {"Synchronize": {"pods": sorted(record.get("pods") or []),  # in no particular order
                                             "containers": sorted(record.get("containers") or [])}}
    for listed, kind in (("pods_full", "pod"), ("containers_full", "container")):
        for item in record.get(listed) or []:
            views[f"Synchronize({item.get('name', '')})"] = {kind: item}
    return views


def _spec(lifecycle: Mapping[str, Any], step: str, label: str) -> Any:
    for found in lifecycle.get("steps", []):
        if found["step"] == step and found.get("label", "").startswith(label):
            return found.get("answer", {}).get("info", {}).get("info", {}).get("runtimeSpec", ABSENT)
    return ABSENT


def observed(run: NriRun) -> dict[str, Any]:
    """``{event: view}`` of the compared pod's life in the order the plugin got them (an event twice: ``Event#2``),
    the other pods' events by name only, then the OCI specs."""
    tokens = run.tokens()
    views: dict[str, Any] = {"events": run.events(), "events of other pods": run.other_events()}
    for record in filter(run.followed, run.records):
        if record["event"] == "Synchronize":
            views.update(placeheld(_synchronized(record), tokens))
            continue
        name, n = record["event"], 2
        while name in views:
            name, n = f"{record['event']}#{n}", n + 1
        views[name] = placeheld(_event_view(record), tokens)
    for view, (step, label) in SPEC_VIEWS.items():
        views[view] = placeheld(_spec(run.lifecycle, step, label), tokens)
    return views


def differences(reference: NriRun, other: NriRun) -> dict[str, tuple[Any, Any]]:
    """``{path: (reference's value, other's value)}`` for every leaf where the two runs' views differ."""
    return leaf_differences(observed(reference), observed(other))
