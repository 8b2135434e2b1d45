"""A private CNI bridge network for a lab containerd: pods get an IP on a host bridge, nothing leaves the machine.

One conflist in the instance's own ``conf_dir``: the ``bridge`` plugin (gateway on the bridge, no
masquerade) with ``host-local`` IPAM keeping its leases in a private ``dataDir``, then ``portmap`` for pod
host ports. The bridge name and the /24 subnet are derived from the lab's directory, so two labs on one
machine get different ones; a subnet another route already uses is skipped.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

CNI_NETWORK_NAME = "runtimeproxy-lab"
CNI_VERSION = "0.4.0"
BRIDGE_PREFIX = "rplab"
IFNAMSIZ = 15  # Linux interface names hold 15 characters
SUBNET_SECOND_OCTETS = range(200, 250)  # 10.200.0.0 - 10.249.255.0: /24s for lab bridges


def bridge_name(lab_dir: Path) -> str:
    digest = hashlib.sha256(str(Path(lab_dir).absolute()).encode()).hexdigest()
    return (BRIDGE_PREFIX + digest)[:IFNAMSIZ]


def _routes_text() -> str:
    proc = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True, check=False)
    return proc.stdout


def pick_subnet(lab_dir: Path) -> str:
    """A 10.x.y.0/24 derived from ``lab_dir`` that no current route uses."""
    seed = int(hashlib.sha256(str(Path(lab_dir).absolute()).encode()).hexdigest(), 16)
    routes = _routes_text()
    count = len(SUBNET_SECOND_OCTETS) * 256
    for step in range(count):
        index = (seed + step) % count
        prefix = f"10.{SUBNET_SECOND_OCTETS[index // 256]}.{index % 256}."
        if prefix not in routes:
            return prefix + "0/24"
    raise RuntimeError("no free 10.200-249.x.0/24 subnet for the lab bridge")


def bridge_conflist(bridge: str, subnet: str, ipam_data_dir: Path) -> dict[str, object]:
    return {
        "cniVersion": CNI_VERSION,
        "name": CNI_NETWORK_NAME,
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": False,  # nothing leaves the machine
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(ipam_data_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def write_bridge_network(conf_dir: Path, lab_dir: Path) -> str:
    """Write the conflist for ``lab_dir``'s bridge into ``conf_dir``; returns the bridge name."""
    bridge = bridge_name(lab_dir)
    conf_dir.mkdir(parents=True, exist_ok=True)
    conflist = bridge_conflist(bridge, pick_subnet(lab_dir), Path(lab_dir) / "cni-ipam")
    (conf_dir / "10-runtimeproxy-lab.conflist").write_text(json.dumps(conflist, indent=2))
    return bridge


def remove_bridge(bridge: str) -> None:
    """Delete the bridge interface once no pod uses it (best effort: it may never have been created)."""
    subprocess.run(["ip", "link", "delete", bridge, "type", "bridge"], capture_output=True, check=False)
