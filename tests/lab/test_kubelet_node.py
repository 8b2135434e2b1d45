"""The standalone kubelet's fixture without a kubelet: its configuration, its mount namespace's script, the PATH it
gets, its manifests, and the host check's verdicts (tests/e2e/test_real_kubelet.py runs the real one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rplab.kubelet_node import (NODE_LABEL, SYSCTLS, HostState, KubeletNode, KubeletNodeError,
                                path_without_iptables)


def node(tmp_path: Path) -> KubeletNode:
    return KubeletNode(tmp_path / "cri.sock", tmp_path / "node", binary=Path("/bin/true"))


def test_a_directory_under_an_overlaid_host_path_is_refused_with_the_fix() -> None:
    with pytest.raises(KubeletNodeError, match="under /var/lib.*elsewhere"):
        KubeletNode(Path("/run/cri.sock"), Path("/var/lib/my-kubelet"))


def test_the_kubelet_is_configured_into_its_directory_and_onto_localhost(tmp_path: Path) -> None:
    kubelet = node(tmp_path)
    config = kubelet.config(port=10999)
    assert config["staticPodPath"] == str(tmp_path / "node" / "manifests")
    assert config["containerRuntimeEndpoint"] == f"unix://{tmp_path / 'cri.sock'}"
    for key in ("podLogsDir", "volumePluginDir"):
        assert Path(config[key]).is_relative_to(tmp_path / "node")
    assert config["cgroupRoot"] == f"/rplab-kubelet-{kubelet.node_id}" and config["cgroupDriver"] == "cgroupfs"
    other = KubeletNode(Path("x"), tmp_path / "elsewhere" / "node")  # a directory of the same name
    assert kubelet.node_id.startswith("node-") and other.node_id.startswith("node-")
    assert other.node_id != kubelet.node_id
    assert KubeletNode(Path("x"), tmp_path / "a b:c").node_id.startswith("a-b-c-")  # a label value
    assert (config["address"], config["port"], config["healthzPort"]) == ("127.0.0.1", 10999, 0)
    assert config["failSwapOn"] is False and config["failCgroupV1"] is False
    assert config["authentication"]["webhook"]["enabled"] is False and config["authorization"]["mode"] == "AlwaysAllow"
    assert config["evictionHard"] == {} and config["imageGCHighThresholdPercent"] == 100
    argv = kubelet.argv()
    assert argv[:5] == ["unshare", "--mount", "--propagation", "private", "--"]
    assert f"--root-dir={tmp_path / 'node' / 'root'}" in argv and f"--cert-dir={tmp_path / 'node' / 'pki'}" in argv


def test_its_namespace_masks_every_sysctl_and_overlays_var_lib_and_var_log(tmp_path: Path) -> None:
    script = node(tmp_path)._namespace_script()
    for name in SYSCTLS:
        assert f"mount --bind '{tmp_path}/node/sysctl/{name.replace('/', '.')}' '/proc/sys/{name}'" in script
    for overlaid in ("lib", "log"):
        assert f"upperdir={tmp_path}/node/overlay/{overlaid}/upper" in script and f"'/var/{overlaid}'" in script
    assert script.startswith("set -e\n") and script.endswith('exec "$@"\n')


def test_its_path_has_no_iptables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_iptables = tmp_path / "sbin"
    with_iptables.mkdir()
    (with_iptables / "ip6tables").touch()
    monkeypatch.setenv("PATH", f"/usr/bin:{with_iptables}:/bin")
    assert path_without_iptables() == "/usr/bin:/bin"


def test_a_manifest_is_labelled_with_the_node_and_written_whole(tmp_path: Path) -> None:
    kubelet = node(tmp_path)
    kubelet.manifests.mkdir(parents=True)
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}, "spec": {}}
    written = kubelet.write_pod(manifest)
    assert json.loads(written.read_text())["metadata"]["labels"] == {NODE_LABEL: kubelet.node_id}
    assert "labels" not in manifest["metadata"]  # the caller's manifest is left alone
    assert [path.name for path in kubelet.manifests.iterdir()] == ["web.json"]
    kubelet.remove_pod("web")
    assert not list(kubelet.manifests.iterdir())


def test_the_host_check_names_each_change() -> None:
    before = HostState({"kernel/panic": "1"}, set(), set(), set(), {"/var/lib/kubelet": None, "/etc/kubernetes": ["a"]})
    after = HostState({"kernel/panic": "10"}, {"iptables filter:KUBE-FIREWALL"}, {"/tmp/x/root"},
                      {"/sys/fs/cgroup/cpu"}, {"/var/lib/kubelet": [], "/etc/kubernetes": ["a", "b"]})
    assert before.changes_to(after) == [
        "sysctl kernel/panic: 1 -> 10", "new iptables chain iptables filter:KUBE-FIREWALL", "new mount /tmp/x/root",
        "cgroup left in /sys/fs/cgroup/cpu", "new path /var/lib/kubelet", "new files in /etc/kubernetes: ['b']"]
    assert before.changes_to(before) == []
