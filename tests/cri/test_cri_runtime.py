"""The CRI frontend's runtime (cri.runtime): what the proxy reads of containerd's own configuration."""

from __future__ import annotations

import json

import pytest

from runtimeproxy.cri.runtime import cdi_in_status


@pytest.mark.parametrize(("config", "carried"), [
    ({"containerd": {}}, False),  # containerd 1.6: no CDI
    ({"enableCDI": False, "cdiSpecDirs": ["/etc/cdi"]}, False),  # 1.7, enable_cdi off (its default)
    ({"enableCDI": True, "cdiSpecDirs": ["/etc/cdi"]}, True),  # 1.7, on
    ({"cdiSpecDirs": ["/etc/cdi", "/var/run/cdi"]}, True),  # 2.x: always on
])
def test_whether_containerd_injects_cdi_devices_is_read_from_its_verbose_status(config: dict, carried: bool) -> None:
    assert cdi_in_status({"config": json.dumps(config)}) is carried
    assert cdi_in_status({"config": "not json"}) is False and cdi_in_status({}) is False
