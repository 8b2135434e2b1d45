"""The benchmark's cases, by name (--cases picks some; bench/__init__.py says what each measures)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bench.cases.containerd import case_kubelet, case_startup
from bench.cases.docker import case_docker
from bench.cases.idle import case_idle
from bench.cases.kubelet_node import case_kubelet_node
from bench.cases.measure import Scale
from bench.cases.soak import case_soak
from bench.cases.synthetic import case_large, case_small
from bench.peers import Lab
from bench.report import CaseReport


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    run: Callable[[Lab, Scale, CaseReport], None]


CASES = {case.name: case for case in (
    Case("small", "1. small calls (Version), instant Go backend", case_small),
    Case("large", "2. large responses (ListContainers), instant Go backend", case_large),
    Case("kubelet", "3. a kubelet's steady state, real containerd", case_kubelet),
    Case("startup", "4. pod startup and lifecycle, real containerd", case_startup),
    Case("docker", "5. Docker mode: list, inspect, exec, real dockerd", case_docker),
    Case("idle", "6. idle (no calls): CPU with no plugins and with 500 registered", case_idle),
    Case("kubelet-node", "7. the real kubelet with N static pods, real containerd", case_kubelet_node),
    Case("soak", "8. a soak: the real kubelet, N pods churning, both plugin kinds, real containerd", case_soak),
)}
DEFAULT_CASES = ("small", "large", "kubelet", "startup")  # docker takes ~2 more minutes: ask for it
LONG_CASES = ("soak",)  # an hour: never in "all", only by name
