"""rplab.koordlet: koordlet's command line and namespace, the pod protocol helpers, its log (no processes)."""

from __future__ import annotations

import json
from pathlib import Path

from rplab.koordlet import (
    BATCH_CPU, BATCH_MEMORY, KERNEL_HOOKS, KERNEL_PROBE_SCRIPT, QOS_LABEL, RESOURCE_STATUS, SKIP_LABEL, Koordlet,
    batch_resources, be_pod, extended_resource_spec, hook_mode_flags, hooks_without_kernel_support, lsr_pod,
    missing_kernel_hooks, parse_kernel_probe, resize, serving,
)
from rplab.kubelet_node import NODE_NAME, KubeletNode


def koordlet(tmp_path: Path, kubeconfig: Path | None = None) -> Koordlet:
    node = KubeletNode(tmp_path / "rp.sock", tmp_path / "node", kubeconfig=kubeconfig)
    node.read_only_port = 10255
    return Koordlet(tmp_path / "koordlet", tmp_path / "admin.kubeconfig", node, tmp_path / "hookserver.d",
                    binary=Path("/bin/koordlet"))


def test_koordlet_runs_on_the_hosts_paths_with_the_kubelets_cgroups_and_registers_into_the_proxys_directory(
        tmp_path: Path) -> None:
    agent = koordlet(tmp_path)
    agent.directory.mkdir()
    argv = agent.argv([(Path("/sys/fs/cgroup/cpu/rplab-kubelet-node"), agent.cgroup_view / "cpu")])
    script = argv[argv.index("-c") + 1]
    assert "mount --bind '/sys/fs/cgroup/cpu/rplab-kubelet-node'" in script and "/etc/hosts" in script
    assert "rplab-node" in (agent.directory / "hosts").read_text()
    flags = argv[argv.index("/bin/koordlet") + 1:]
    for flag in ("--proc-root-dir=/proc/", "--sys-root-dir=/sys/", "--sys-fs-root-dir=/sys/fs/",
                 f"--cgroup-root-dir={agent.cgroup_view}/",
                 f"--runtime-hooks-config-path={tmp_path / 'hookserver.d'}",
                 f"--runtime-hooks-host-endpoint={agent.socket}", "--enable-nri-runtime-hook=false",
                 "--kubelet-read-only-port=10255", "--kubelet-preferred-address-type=Hostname"):
        assert flag in flags


def test_a_registered_kubelet_takes_the_hosts_address_a_standalone_one_loopback(tmp_path: Path) -> None:
    assert "--node-ip=127.0.0.1" in KubeletNode(tmp_path / "s", tmp_path / "a").argv()
    registered = KubeletNode(tmp_path / "s", tmp_path / "b", kubeconfig=tmp_path / "node.kubeconfig").argv()
    assert f"--kubeconfig={tmp_path / 'node.kubeconfig'}" in registered
    assert not any(flag.startswith("--node-ip") for flag in registered)


def test_a_be_pods_batch_resources_and_koord_managers_annotation() -> None:
    resources = batch_resources(500, "256Mi")
    assert resources["requests"] == resources["limits"] == {BATCH_CPU: "500", BATCH_MEMORY: "256Mi"}
    assert json.loads(extended_resource_spec({"main": resources})) == {"containers": {"main": resources}}


def test_a_socket_file_nobody_serves_is_not_serving(tmp_path: Path) -> None:
    (tmp_path / "dead.sock").write_text("")
    assert not serving(tmp_path / "dead.sock") and not serving(tmp_path / "missing.sock")


def test_the_log_tail_of_a_failed_start_keeps_the_first_of_each_problem(tmp_path: Path) -> None:
    agent = koordlet(tmp_path)
    agent.directory.mkdir()
    agent.log_path.write_text("I1 a.go:1] fine\nW1 b.go:2] first\nW1 b.go:2] again\nE1 c.go:3] broken\n")
    assert agent.log_tail(problems_only=True).splitlines()[1:] == ["W1 b.go:2] first", "E1 c.go:3] broken"]


def test_the_hooks_a_kernel_cannot_serve_are_named_with_what_is_missing(tmp_path: Path) -> None:
    cgroup, proc, dev = tmp_path / "cgroup", tmp_path / "proc", tmp_path / "dev"
    for directory in (cgroup / "cpu", proc / "sys/kernel", dev):
        directory.mkdir(parents=True)
    (proc / "filesystems").write_text("nodev\tcgroup\nnodev\tcgroup2\n")
    bare = hooks_without_kernel_support(cgroup, proc, dev)
    assert {"group identity", "resctrl", "GPU env"} <= set(bare) and set(bare) <= set(KERNEL_HOOKS)
    assert "cpu.bvt_warp_ns" in bare["group identity"]
    (cgroup / "cpu" / "cpu.bvt_warp_ns").write_text("0\n")
    (proc / "sys/kernel/sched_core").write_text("1\n")
    (proc / "filesystems").write_text("nodev\tcgroup\nnodev\tresctrl\n")
    (dev / "nvidia0").touch()
    assert hooks_without_kernel_support(cgroup, proc, dev) == {}


def test_the_kernel_probe_a_guests_shell_runs_says_the_same_as_the_hosts_checks() -> None:
    present = parse_kernel_probe("group identity=0\ncore scheduling=1\nresctrl=0\nGPU env=0\nrplab-exit=0\n")
    assert present == {"group identity": False, "core scheduling": True, "resctrl": False, "GPU env": False}
    assert set(missing_kernel_hooks(present)) == {"group identity", "resctrl", "GPU env"}
    assert set(missing_kernel_hooks({})) == set(KERNEL_HOOKS)
    assert all(f"echo '{hook}=1'" in KERNEL_PROBE_SCRIPT for hook in KERNEL_HOOKS)


def test_the_pods_of_the_scenarios_as_koordinators_controllers_leave_them() -> None:
    be = be_pod("be", {SKIP_LABEL: "true"})
    assert be["metadata"]["labels"] == {QOS_LABEL: "BE", SKIP_LABEL: "true"}
    assert be["spec"]["nodeName"] == NODE_NAME and be["spec"]["hostNetwork"] is True
    lsr = lsr_pod("lsr", "3")
    assert json.loads(lsr["metadata"]["annotations"][RESOURCE_STATUS]) == {"cpuset": "3"}
    assert lsr["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "1", "memory": "64Mi"}
    assert resize("1500m")["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "1500m"


def test_hook_mode_flags_name_the_nodes_paths_with_one_trailing_slash() -> None:
    flags = hook_mode_flags(cgroup_root="/sys/fs/cgroup", kubelet_root="/var/lib/k/root/", socket="/run/k.sock",
                            hook_config_dir="/etc/runtime/hookserver.d", read_only_port=10255, state="/s", nri=False,
                            metrics_address="127.0.0.1:9316")
    for flag in ("--cgroup-root-dir=/sys/fs/cgroup/", "--var-lib-kubelet-dir=/var/lib/k/root/",
                 "--runtime-hooks-addr=/run/k.sock", "--runtime-hooks-config-path=/etc/runtime/hookserver.d",
                 "--enable-nri-runtime-hook=false", "--tsdb-path=/s/tsdb", "--addr=127.0.0.1:9316"):
        assert flag in flags
