"""What koordinator's koord-runtime-proxy and this proxy do with the same hook plugin over the same pod's life, as
plain data two runs compare with (tests/e2e/test_koord_differential.py).

A run is what the plugin received through one proxy (each hook's request, in order) and what the pod and its
container ended up with (the driver's view: crictl's inspect output, or the kubelet client's document of
rplab.kubelet). ``observed`` makes one view of it: ``hooks`` (the hooks called, in order), one entry per hook call
(``Hook``, a second call ``Hook#2``) and the driver's views, with what each run chose (pod names, uids, log
directories, the IDs the runtime gave) replaced by placeholders and times and pids masked. ``differences`` is every
leaf where two views differ (rplab.differential.leaf_differences), keyed ``View.field.path``: what a test's table of
known differences is checked against (rplab.differential.unexplained).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from rplab.differential import leaf_differences, placeheld

CONTAINER_ID = "<container-id>"


def request_view(request: Message) -> dict[str, Any]:
    """A hook request as plain data (proto field names; absent and empty alike, as protobuf has it)."""
    return json_format.MessageToDict(request, preserving_proto_field_name=True)


@dataclass(frozen=True)
class HookedRun:
    """One pod's life through one proxy: the plugin's requests, the driver's views, what this run chose."""

    requests: list[tuple[str, dict[str, Any]]]  # (hook, request as plain data), in the order received
    state: Mapping[str, Any]  # view name -> what the driver read of the pod and its container
    tokens: Mapping[str, str] = field(default_factory=dict)  # what this run chose -> its placeholder

    def hooks(self) -> list[str]:
        return [hook for hook, _ in self.requests]

    def all_tokens(self) -> dict[str, str]:
        """The run's own tokens and the container IDs its requests name."""
        found = {request.get("container_meta", {}).get("id", ""): CONTAINER_ID for _, request in self.requests}
        found.pop("", None)
        return {**found, **self.tokens}


def observed(run: HookedRun) -> dict[str, Any]:
    views: dict[str, Any] = {"hooks": run.hooks()}
    for hook, request in run.requests:
        name, n = hook, 2
        while name in views:
            name, n = f"{hook}#{n}", n + 1
        views[name] = request
    views.update(run.state)
    return placeheld(views, run.all_tokens())


def differences(reference: HookedRun, other: HookedRun) -> dict[str, tuple[Any, Any]]:
    """``{path: (reference's value, other's value)}`` for every leaf where the two runs' views differ."""
    return leaf_differences(observed(reference), observed(other))
