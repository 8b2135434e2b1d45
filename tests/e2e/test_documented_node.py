"""The node's commands of docs/install.md and docs/operating.md as written: the proxy run by hand on the node's
default paths, a private one beside it, `runtimeproxyctl` on both, shadow and promote, against this session's
containerd bound at containerd's default socket in a private namespace (tests/namespacekit.py), so the node's
paths are the namespace's own and nothing reaches the host."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rplab.containerd import ContainerdInstance
from rplab.cri import CriClient, open_channel

from tests.kits.docs import REPO_ROOT, doc_block, doc_command
from tests.kits.namespace import Namespace, private_namespace, private_setup

STATUS = "runtimeproxyctl status"
TRACE = "runtimeproxyctl trace POD"
TRACE_PAGES = ("README.md", "docs/index.md", "docs/nri.md", "docs/operating.md")
STATUS_PAGES = ("README.md", "docs/failure-modes.md", "docs/install.md", "docs/nri.md", "docs/operating.md",
                "docs/plugins.md")
CONFIG_DIR = "/etc/runtime/hookserver.d"
PLUGINS = {"koordlet": "/run/koordlet/koordlet.sock", "koordlet.v2": "/var/run/koordlet-v2/koordlet.sock"}
ADMIN_SOCKET = "/run/koord-runtimeproxy/admin.sock"


@dataclass
class Node:
    namespace: Namespace
    work: Path

    def wait_for_socket(self, path: str) -> None:
        done = self.namespace.run(f"for i in $(seq 300); do [ -S {path} ] && exit; sleep 0.1; done; exit 1", self.work)
        assert done.returncode == 0, f"{path} did not appear:\n" + "".join(
            log.read_text()[-2000:] for log in self.work.glob("*.log"))

    def run(self, command: str) -> str:
        done = self.namespace.run(command, REPO_ROOT)
        assert done.returncode == 0, f"{command!r} exited {done.returncode}: {done.stdout}{done.stderr}"
        assert done.stderr == "", done.stderr
        return done.stdout


@pytest.fixture(scope="module")
def node(containerd: ContainerdInstance, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """The proxy run by hand (install.md) with two plugins registered in the node's config directory."""
    work = tmp_path_factory.mktemp("documented-node")
    with private_namespace(private_setup(containerd.address)) as namespace:
        node = Node(namespace, work)
        node.run(f"mkdir -m 0755 -p {CONFIG_DIR}")
        for name, socket in PLUGINS.items():
            namespace.start(f"exec python3 -m rplab.example_plugin --socket {socket}", REPO_ROOT,
                            work / f"{name}.log")
            node.wait_for_socket(socket)
            registration = {"remote-endpoint": socket, "runtime-hooks": ["PreRunPodSandbox", "PreCreateContainer"]}
            node.run(f"echo '{json.dumps(registration)}' > {CONFIG_DIR}/{name}.json")
        proxy = namespace.start(doc_block("docs/install.md", "by-hand"), REPO_ROOT, work / "proxy.log")
        node.wait_for_socket(ADMIN_SOCKET)
        yield node
        assert namespace.stop(proxy) == 0, (work / "proxy.log").read_text()[-3000:]


def test_the_proxy_run_by_hand_serves_the_kubelets_socket(node: Node) -> None:
    node.wait_for_socket("/var/run/koord-runtimeproxy/runtimeproxy.sock")
    for page in STATUS_PAGES:
        shown = node.run(doc_command(page, STATUS))
        assert "containerd" in shown and "koordlet.v2.json" in shown, shown


def test_a_private_proxy_and_the_admin_endpoint_variable(node: Node) -> None:
    """install.md's private proxy (its server, then its status line "in another shell"), and operating.md's
    RUNTIMEPROXY_ADMIN_ENDPOINT against it."""
    block = doc_block("docs/install.md", "private-proxy")
    server, other_shell = block[:block.index("# in another shell")], block[block.index("# in another shell"):]
    proxy = node.namespace.start(server, REPO_ROOT, node.work / "private-proxy.log")
    node.wait_for_socket("/tmp/rp/runtimeproxy-admin.sock")
    assert "/tmp/rp/runtimeproxy.sock" in node.run(other_shell)
    assert "/tmp/rp/runtimeproxy.sock" in node.run(doc_block("docs/operating.md", "admin-endpoint"))
    assert node.namespace.stop(proxy) == 0, (node.work / "private-proxy.log").read_text()[-3000:]


def test_shadow_stage_and_promote_a_plugin(node: Node) -> None:
    """operating.md's shadow commands and its recipe's, in its order, on the plugins its recipe names."""
    for command in ("runtimeproxyctl shadow koordlet.v2 --stage", "runtimeproxyctl unshadow koordlet.v2"):
        node.run(doc_command("docs/operating.md", command))
    node.run(doc_block("docs/operating.md", "shadow"))
    node.run(doc_command("docs/operating.md", "runtimeproxyctl disable koordlet --reason \"replaced by v2\""))
    node.run(doc_command("docs/operating.md", "runtimeproxyctl shadow koordlet.v2"))
    node.run(doc_command("docs/operating.md", "runtimeproxyctl shadow nri:20-name --stage"))
    shown = json.loads(node.run("runtimeproxyctl status -o json"))
    assert "replaced by v2" in json.dumps(shown)
    node.run("runtimeproxyctl enable --all && runtimeproxyctl unshadow koordlet.v2 && runtimeproxyctl unshadow nri:20-name")


def test_trace_shows_why_a_pod_got_what_it_got(node: Node) -> None:
    """`runtimeproxyctl trace POD`, POD a pod run through the proxy's CRI socket as the kubelet runs one (reached
    from here through the namespace's root)."""
    socket = f"/proc/{node.namespace.holder.pid}/root/run/koord-runtimeproxy/runtimeproxy.sock"
    client = CriClient(open_channel(socket))
    pod_id = client.run_pod(client.pod_config("doc-trace", node.work / "pod-logs"))
    try:
        for page in TRACE_PAGES:
            shown = node.run(doc_command(page, TRACE).replace("POD", "default/doc-trace"))
            assert shown.startswith("pod default/doc-trace ") and "PreRunPodSandbox" in shown, shown
    finally:
        client.runtime.StopPodSandbox(client.api.StopPodSandboxRequest(pod_sandbox_id=pod_id), timeout=60)
        client.runtime.RemovePodSandbox(client.api.RemovePodSandboxRequest(pod_sandbox_id=pod_id), timeout=60)
        client.channel.close()
