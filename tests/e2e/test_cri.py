"""The proxy in front of a real containerd: nothing a CRI client sees may change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message

from runtimeproxy.lab.burst import burst
from runtimeproxy.lab.containerd import ContainerdInstance
from runtimeproxy.lab.cri import CriClient
from runtimeproxy.lab.images import BUSYBOX_IMAGE, LAB_IMAGES
from runtimeproxy.lab.kinds import tally_every_kind
from runtimeproxy.lab.process import ProxyProcess

UNKNOWN_ID = "0" * 64


def test_version_and_status_match_direct(proxied: CriClient, direct: CriClient) -> None:
    api = proxied.api
    via_proxy = proxied.runtime.Version(api.VersionRequest(version="0.1.0"), timeout=10)
    assert via_proxy == direct.runtime.Version(api.VersionRequest(version="0.1.0"), timeout=10)
    assert via_proxy.runtime_name == "containerd"
    assert proxied.runtime.Status(api.StatusRequest(verbose=True), timeout=10) == \
        direct.runtime.Status(api.StatusRequest(verbose=True), timeout=10)


def test_images_are_listed_and_described(proxied: CriClient, direct: CriClient) -> None:
    api = proxied.api
    assert set(LAB_IMAGES) <= set(proxied.image_tags())
    assert _canonical(proxied.images.ListImages(api.ListImagesRequest(), timeout=10)) == \
        _canonical(direct.images.ListImages(api.ListImagesRequest(), timeout=10))
    request = api.ImageStatusRequest(image=api.ImageSpec(image=BUSYBOX_IMAGE), verbose=True)
    status = proxied.images.ImageStatus(request, timeout=10)
    assert BUSYBOX_IMAGE in status.image.repo_tags
    assert status == direct.images.ImageStatus(request, timeout=10)


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


def _error(call: Any, request: Message) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as raised:
        call(request, timeout=10)
    return raised.value.code(), raised.value.details()


@pytest.mark.parametrize(
    ("method", "request_type", "field"),
    [
        ("PodSandboxStatus", "PodSandboxStatusRequest", "pod_sandbox_id"),
        ("ContainerStatus", "ContainerStatusRequest", "container_id"),
        ("StartContainer", "StartContainerRequest", "container_id"),
        ("StopContainer", "StopContainerRequest", "container_id"),
        ("StopPodSandbox", "StopPodSandboxRequest", "pod_sandbox_id"),
        ("ExecSync", "ExecSyncRequest", "container_id"),
        ("UpdateContainerResources", "UpdateContainerResourcesRequest", "container_id"),
    ],
)
def test_unknown_ids_fail_exactly_as_direct(
    proxied: CriClient, direct: CriClient, method: str, request_type: str, field: str
) -> None:
    request = getattr(proxied.api, request_type)(**{field: UNKNOWN_ID})
    via_proxy = _error(getattr(proxied.runtime, method), request)
    assert via_proxy == _error(getattr(direct.runtime, method), request)
    assert via_proxy[0] is grpc.StatusCode.NOT_FOUND


def test_get_container_events_unimplemented_passes_through(
    proxied_channel: grpc.Channel, direct_channel: grpc.Channel
) -> None:
    # containerd 1.6 does not implement this runtime.v1 server stream.
    proxied, direct = CriClient(proxied_channel), CriClient(direct_channel)
    request = proxied.api.GetEventsRequest()

    def first_error(client: CriClient) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.RpcError) as raised:
            list(client.runtime.GetContainerEvents(request, timeout=10))
        return raised.value.code(), raised.value.details()

    via_proxy = first_error(proxied)
    assert via_proxy == first_error(direct)
    assert via_proxy[0] is grpc.StatusCode.UNIMPLEMENTED


def _canonical(message: Message) -> Message:
    """A copy without what legitimately differs call to call: fields named *timestamp*
    (cleared, recursively) and the order of listed items (containerd lists in map order)."""
    copy = type(message)()
    copy.CopyFrom(message)
    _clear_timestamps(copy)
    for field, value in copy.ListFields():
        if field.is_repeated and field.message_type is not None and "id" in field.message_type.fields_by_name:
            items = sorted(value, key=lambda item: item.id)
            copy.ClearField(field.name)
            getattr(copy, field.name).extend(items)
    return copy


def _clear_timestamps(message: Message) -> None:
    for field, value in message.ListFields():
        if "timestamp" in field.name:
            message.ClearField(field.name)
        elif field.message_type is not None and not field.message_type.GetOptions().map_entry:
            for item in (value if field.is_repeated else [value]):
                _clear_timestamps(item)


def test_differential_direct_vs_proxy(
    proxied: CriClient, direct: CriClient, log_dir: Path, cleanup_pods: list[str]
) -> None:
    """Every read call on a live pod answers the same through the proxy as directly."""
    api = proxied.api
    pod_config = proxied.pod_config(f"diff-{proxied.version}", log_dir)
    pod_id = proxied.run_pod(pod_config)
    cleanup_pods.append(pod_id)
    container_id = proxied.create_container(pod_id, proxied.container_config("box"), pod_config)
    proxied.start_container(container_id)

    calls: list[tuple[str, str, Message]] = [
        ("runtime", "Version", api.VersionRequest()),
        ("runtime", "Status", api.StatusRequest(verbose=True)),
        ("runtime", "ListPodSandbox", api.ListPodSandboxRequest()),
        ("runtime", "PodSandboxStatus", api.PodSandboxStatusRequest(pod_sandbox_id=pod_id, verbose=True)),
        ("runtime", "ListContainers", api.ListContainersRequest()),
        ("runtime", "ContainerStatus", api.ContainerStatusRequest(container_id=container_id, verbose=True)),
        ("runtime", "ExecSync", api.ExecSyncRequest(container_id=container_id, cmd=["cat", "/etc/passwd"], timeout=10)),
        ("runtime", "Exec", api.ExecRequest(container_id=container_id, cmd=["sh"], stdout=True)),
        ("images", "ListImages", api.ListImagesRequest()),
        ("images", "ImageStatus", api.ImageStatusRequest(image=api.ImageSpec(image=BUSYBOX_IMAGE))),
        ("images", "ImageFsInfo", api.ImageFsInfoRequest()),
    ]
    for service, method, request in calls:
        answers = [getattr(getattr(client, service), method)(request, timeout=30) for client in (direct, proxied)]
        if method == "Exec":  # a one-time streaming URL: same server, new token each time
            assert all(a.url.startswith("http://127.0.0.1:") for a in answers), answers
            assert answers[0].url.rsplit("/", 1)[0] == answers[1].url.rsplit("/", 1)[0]
            continue
        assert _canonical(answers[0]) == _canonical(answers[1]), method


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
