"""The event table on the wire: each row's messages, the subscription mask, the notifications."""

from __future__ import annotations

from runtimeproxy.hooks import nri_events
from runtimeproxy.hooks.nri_events import EVENTS
from runtimeproxy.nri.events import BY_NUMBER, KNOWN_EVENTS_MASK, NOTIFICATIONS, WIRE
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri


def test_every_row_is_a_method_of_the_plugin_service_with_its_messages() -> None:
    service = nri.DESCRIPTOR.services_by_name["Plugin"]
    for row in EVENTS:
        method = service.methods_by_name[row.method]
        wire = WIRE[row.name]
        assert (method.input_type, method.output_type) == (wire.request.DESCRIPTOR, wire.response.DESCRIPTOR)
        assert nri.Event.Name(row.number) != "UNKNOWN" and BY_NUMBER[row.number] is wire


def test_the_mask_is_every_event_validation_included_as_containerd_nri_s_valid_events() -> None:
    assert KNOWN_EVENTS_MASK == (1 << nri.VALIDATE_CONTAINER_ADJUSTMENT) - 1
    assert nri.STOP_CONTAINER not in NOTIFICATIONS and nri.POST_UPDATE_POD_SANDBOX in NOTIFICATIONS


def test_a_request_carries_what_its_message_has_room_for() -> None:
    pod, container = nri.PodSandbox(id="p"), nri.Container(id="c")
    resources = nri.LinuxResources(cpu=nri.LinuxCPU(cpus="0-1"))
    stop = WIRE[nri_events.STOP_POD_SANDBOX].message(pod=pod, container=container, linux_resources=resources)
    assert stop == nri.StopPodSandboxRequest(pod=pod)
    resize = WIRE[nri_events.UPDATE_POD_SANDBOX].message(pod=pod, container=container, linux_resources=resources)
    assert resize == nri.UpdatePodSandboxRequest(pod=pod, linux_resources=resources)
    assert WIRE[nri_events.CREATE_CONTAINER].answers("adjust") and not WIRE[nri_events.UPDATE_CONTAINER].answers(
        "adjust")
