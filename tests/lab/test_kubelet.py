"""rplab.kubelet's reading of the crilifecycle peer's document: steps by name, failures, and the differences of two
runs (the driver itself runs against real containerd in tests/e2e/test_cri_client.py)."""

from __future__ import annotations

from typing import Any

from rplab.kubelet import BINARY_ENV_IN_CONTAINER, BINARY_ENV_SENT, Lifecycle, differences


def document(**overrides: Any) -> dict[str, Any]:
    steps = [
        {"step": "Version", "answer": {"runtime_name": "containerd"}, "wire": [{"method": "RuntimeService/Version",
                                                                               "code": "OK"}]},
        {"step": "RuntimeConfig", "label": "the cgroup driver", "error": {"code": "UNIMPLEMENTED", "message": "no"},
         "wire": [{"method": "RuntimeService/RuntimeConfig", "code": "UNIMPLEMENTED", "message": "no"}]},
        {"step": "ContainerStatus", "label": "running, verbose", "answer": {"status": {"id": "<container-id>"}},
         "wire": []},
        {"step": "ContainerStatus", "label": "exited", "answer": {"status": {"exit_code": 0}}, "wire": []},
    ]
    return {"client": "k8s.io/cri-client v0.37.2", "streaming": False, "steps": steps,
            "binary_env": {"sent_hex": "666ffffe6f"}, **overrides}


def test_two_equal_runs_have_no_difference() -> None:
    assert differences(Lifecycle(document()), Lifecycle(document())) == []


def test_a_differing_value_is_named_by_its_step_label_and_path() -> None:
    changed = document()
    changed["steps"][3]["answer"]["status"]["exit_code"] = 137
    assert differences(Lifecycle(document()), Lifecycle(changed)) == [
        "ContainerStatus[exited].answer.status.exit_code: 0 != 137"]


def test_a_step_made_by_one_run_only_is_a_difference() -> None:
    shorter = document()
    del shorter["steps"][2:]
    assert differences(Lifecycle(document()), Lifecycle(shorter)) == [
        "ContainerStatus[running, verbose]: only in the first run", "ContainerStatus[exited]: only in the first run"]


def test_the_binary_env_is_compared_too() -> None:
    other = document(binary_env={"sent_hex": "666ffffe6f", "in_container_hex": "00"})
    assert differences(Lifecycle(document()), Lifecycle(other)) == ["binary_env: in_container_hex: '<absent>' != '00'"]


def test_steps_failures_and_calls() -> None:
    run = Lifecycle(document())
    assert run.step("ContainerStatus", "exited")["answer"] == {"status": {"exit_code": 0}}
    assert run.step("ContainerStatus")["label"] == "running, verbose"
    assert run.failed() == {"RuntimeConfig[the cgroup driver]": {"code": "UNIMPLEMENTED", "message": "no"}}
    assert run.called() == ["RuntimeService/Version", "RuntimeService/RuntimeConfig"]


def test_each_byte_that_is_not_utf8_becomes_one_replacement_character() -> None:
    assert BINARY_ENV_SENT == b"fo\xff\xfeo"
    assert BINARY_ENV_IN_CONTAINER == b"fo\xef\xbf\xbd\xef\xbf\xbdo"
