"""The lab's CNI bridge network: names and subnets per lab directory, a conflist containerd can use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rplab import cni


def test_bridge_name_fits_and_differs_per_lab(tmp_path: Path) -> None:
    first, second = cni.bridge_name(tmp_path / "a"), cni.bridge_name(tmp_path / "b")
    assert first != second
    assert len(first) <= cni.IFNAMSIZ and first.startswith(cni.BRIDGE_PREFIX)


def test_subnet_skips_routes_in_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cni, "_routes_text", lambda: "")
    preferred = cni.pick_subnet(tmp_path)
    taken = preferred.rsplit(".", 1)[0] + ".0/24 dev rplabother proto kernel"
    monkeypatch.setattr(cni, "_routes_text", lambda: taken)
    other = cni.pick_subnet(tmp_path)
    assert other != preferred and other.startswith("10.") and other.endswith(".0/24")


def test_conflist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cni, "_routes_text", lambda: "")
    bridge = cni.write_bridge_network(tmp_path / "net.d", tmp_path)
    (conf,) = (tmp_path / "net.d").iterdir()
    document = json.loads(conf.read_text())
    bridge_plugin, portmap = document["plugins"]
    assert bridge_plugin["bridge"] == bridge and bridge_plugin["ipMasq"] is False  # nothing leaves the machine
    assert bridge_plugin["ipam"]["dataDir"] == str(tmp_path / "cni-ipam")  # leases stay private
    assert portmap == {"type": "portmap", "capabilities": {"portMappings": True}}
