"""The benchmark's pure helpers: percentiles, the table, the kubelet schedule, /proc reading, the
case selection, the Docker case's containers. Benchmarks themselves never run in
tests."""

from __future__ import annotations

import os

import pytest

from bench.cases import CASES
from bench.cases.containerd import NodePods, kubelet_schedule
from bench.docker_node import sandbox_body, sandbox_name
from bench.procfs import CpuUsage, memory_mb
from bench.report import CaseReport, Row, number, percentile, render, render_markdown
from bench.run import parse_args
from runtimeproxy.docker.messages import docker_type, inspected, pod_labels_of


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([7.0], 1) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_ratio_needs_both_figures() -> None:
    row = Row("m", "us", {"direct": 100.0, "proxy": 250.0, "go-relay": None})
    assert row.ratio("proxy", "direct") == 2.5
    assert row.ratio("proxy", "go-relay") is None
    assert row.ratio("proxy", "aio-relay") is None


def test_number_keeps_about_three_figures() -> None:
    assert [number(v) for v in (None, 41234.5, 12.34, 1.234, 0.1234)] == ["-", "41,234", "12.3", "1.23", "0.123"]


def test_table_shows_only_the_peers_a_case_measured() -> None:
    report = CaseReport("small", "1. small calls")
    row = report.row("Version p50, c=1", "us", {"direct": 100.0, "proxy": 700.0, "aio-relay": 690.0})
    report.target(row, "proxy <= 1.1x aio", True, "1.01x")
    text = render([report], ["header"])
    assert "go-relay" not in text and "socat" not in text
    assert "7.00x" in text and "1.01x" in text
    assert "targets:" in text and "met" in text
    markdown = render_markdown([report])
    assert markdown.splitlines()[0].startswith("| case | metric | unit | direct | proxy | aio-relay |")
    assert "| small | Version p50, c=1 | us | 100 | 700 | 690 | 7.00x | 1.01x | met: 1.01x" in markdown


def test_kubelet_schedule_on_110_pods_is_about_nine_calls_a_second() -> None:
    pods = NodePods([(f"pod{n}", f"ctr{n}") for n in range(110)])
    minute = [kubelet_schedule(pods, second) for second in range(60)]
    synced = {request for second in minute for method, request in second if method.endswith("/ContainerStatus")}
    assert len(synced) == 110  # every pod once a minute
    assert 7.5 <= sum(len(second) for second in minute) / 60 <= 10


def test_cpu_and_memory_of_this_process() -> None:
    usage = CpuUsage.of_tree(os.getpid())
    assert usage.cpu > 0 and usage.minor_faults > 0
    assert usage.minus(usage).cpu == 0
    assert memory_mb(os.getpid()) > 1


def test_docker_case_is_picked_by_name_or_all_but_not_by_default() -> None:
    assert "docker" not in parse_args([]).case_names
    assert parse_args(["--cases", "docker"]).case_names == ["docker"]
    assert parse_args(["--cases", "all"]).case_names == [name for name in CASES if name != "soak"]
    assert parse_args(["--cases", "soak"]).case_names == ["soak"]
    with pytest.raises(SystemExit):
        parse_args(["--cases", "dockr"])


def test_docker_table_heads_the_go_reverse_proxy_ratio() -> None:
    report = CaseReport("docker", "5. Docker mode")
    report.row("inspect p50, c=1", "us", {"direct": 400.0, "proxy": 1000.0, "go-proxy": 500.0, "socat": 450.0})
    text = render([report], ["header"])
    assert "go-proxy" in text and "/go-http" in text and "2.00x" in text and "2.50x" in text


def test_docker_node_sandboxes_look_like_cri_dockerd_ones_to_the_proxy() -> None:
    body = sandbox_body(7)
    found = inspected({"Id": "c1", "Name": "/" + sandbox_name(7), "Config": {"Labels": body["Labels"]},
                       "HostConfig": body["HostConfig"]})
    assert found is not None and docker_type(found.labels) == "podsandbox"
    assert (found.name.container, found.name.pod, found.name.namespace) == ("POD", "bench-7", "default")
    assert pod_labels_of(found.labels) == {"app": "bench", "io.kubernetes.pod.name": "bench-7",
                                           "io.kubernetes.pod.namespace": "default",
                                           "io.kubernetes.pod.uid": found.name.uid}


def test_kubelet_mix_on_110_pods_is_the_real_kubelets_pace() -> None:
    from bench.cases.containerd import kubelet_mix

    pods = NodePods([(f"pod{n}", f"ctr{n}") for n in range(110)])
    mix = kubelet_mix(pods)
    per_second = {method.rpartition("/")[2]: 1 / interval for method, _, interval in mix}
    assert per_second["ListPodSandbox"] == per_second["ListContainers"] == 1.0  # PLEG relist
    assert 4.0 <= sum(per_second.values()) <= 5.0  # ~4.7 calls/s counted at 110 pods
    assert all(method.startswith(("/runtime.v1.RuntimeService/", "/runtime.v1.ImageService/"))
               for method, _, _ in mix)


def test_a_peer_whose_every_call_failed_has_no_figure() -> None:
    from bench.cases.measure import column

    result = {"proxy": {"calls": 10, "p50_us": 900.0}, "koord": {"calls": 0, "p50_us": 0.0}, "direct": {}}
    assert column(result, "p50_us", 1e-3) == {"proxy": 0.9, "koord": None, "direct": None}
