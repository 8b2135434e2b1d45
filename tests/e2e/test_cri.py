"""The proxy in front of a real containerd: a pod's life through it, unknown methods, big metadata, bursts.

Call-by-call equality with direct answers, for every CRI method, is test_differential.py's job; a pod's life as
the kubelet's own CRI client (runtime.v1) lives it, direct and through the proxy, is test_cri_client.py's."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from rplab.burst import burst
from rplab.containerd import ContainerdInstance
from rplab.cri import CriClient
from rplab.kinds import tally_every_kind
from rplab.process import ProxyProcess
from tests.kits.env import SECRET_SEEN, binary_env_seen


# runtime.v1's lifecycle is the kubelet's own client's (test_cri_client.py); v1alpha2 (kubelets up to 1.25) has no
# Go client in the peers, so this one plays it.
@pytest.mark.parametrize("api_version", ["v1alpha2"])
def test_full_pod_lifecycle_through_the_proxy(
    proxied: CriClient, direct: CriClient, log_dir: Path, cleanup_pods: list[str]
) -> None:
    api = proxied.api
    pod_config = proxied.pod_config(f"life-{proxied.version}", log_dir, labels={"app": "life"})
    pod_id = proxied.run_pod(pod_config)
    cleanup_pods.append(pod_id)
    assert pod_id in direct.pod_ids()

    config = proxied.container_config("box", envs={"GREETING": "hello"})
    container_id = proxied.create_container(pod_id, config, pod_config)
    proxied.start_container(container_id)

    result = proxied.exec_sync(container_id, ["sh", "-c", "echo $GREETING; echo oops >&2; exit 3"])
    assert (result.stdout, result.stderr, result.exit_code) == (b"hello\n", b"oops\n", 3)

    status = proxied.container_status(container_id).status
    assert status.state == api.CONTAINER_RUNNING
    assert status.metadata.name == "box"
    listed = proxied.runtime.ListContainers(api.ListContainersRequest(
        filter=api.ContainerFilter(pod_sandbox_id=pod_id)), timeout=10)
    assert [c.id for c in listed.containers] == [container_id]
    pods = proxied.runtime.ListPodSandbox(api.ListPodSandboxRequest(
        filter=api.PodSandboxFilter(id=pod_id)), timeout=10)
    assert [p.metadata.name for p in pods.items] == [pod_config.metadata.name]

    proxied.stop_container(container_id)
    assert proxied.container_status(container_id).status.state == api.CONTAINER_EXITED
    proxied.remove_container(container_id)
    proxied.stop_pod(pod_id)
    assert proxied.pod_status(pod_id).status.state == api.SANDBOX_NOTREADY
    proxied.remove_pod(pod_id)
    assert pod_id not in direct.pod_ids()


@pytest.mark.parametrize("path", ["/runtime.v2.RuntimeService/Version", "/runtime.v1.RuntimeService/NoSuchCall"])
def test_every_kind_of_call_to_an_unknown_method_is_unimplemented_as_direct(
    proxied_channel: grpc.Channel, direct_channel: grpc.Channel, path: str
) -> None:
    # The kubelet learns which features exist from UNIMPLEMENTED: it must be exact, every time.
    direct = tally_every_kind(direct_channel, path, times=1)
    for kind, tally in tally_every_kind(proxied_channel, path, times=100).items():
        (expected,) = direct[kind]
        assert expected[0] == "UNIMPLEMENTED", (kind, expected)
        assert tally == {expected: 100}, kind


def test_metadata_over_8_kib_is_accepted_as_directly(proxied: CriClient, direct: CriClient) -> None:
    request = proxied.api.VersionRequest()
    metadata = (("x-big", "a" * 1024 * 1024), ("x-big-bin", bytes(100 * 1024)))
    assert proxied.runtime.Version(request, timeout=10, metadata=metadata) == \
        direct.runtime.Version(request, timeout=10, metadata=metadata)


@pytest.mark.parametrize("channels", [1, 2000])
def test_a_burst_of_concurrent_calls_is_served_as_directly(
    proxy_process: ProxyProcess, containerd: ContainerdInstance, channels: int
) -> None:
    assert burst(Path(containerd.address), calls=2000, channels=channels) == {("OK", ""): 2000}
    assert burst(proxy_process.listen_path, calls=2000, channels=channels) == {("OK", ""): 2000}



def test_a_binary_env_value_reaches_the_container_as_directly(
    proxied_channel: grpc.Channel, direct_channel: grpc.Channel, log_dir: Path, cleanup_pods: list[str]
) -> None:
    direct = binary_env_seen(CriClient(direct_channel), log_dir / "direct", cleanup_pods)
    proxied = binary_env_seen(CriClient(proxied_channel), log_dir / "proxied", cleanup_pods)
    # containerd writes the spec as JSON: one U+FFFD per byte that is not UTF-8, with or without the proxy.
    assert direct == SECRET_SEEN
    assert proxied == direct
