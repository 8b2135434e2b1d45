"""An env value that is not UTF-8, as kubelets on cri-api v0.36.2 and later send a Secret's data, and what a
container given it sees: the e2e tests of every path (direct, bare, hooked, NRI) compare against it."""

from __future__ import annotations

import json
from pathlib import Path

from rplab.cri import CriClient

SECRET = b"\xff\xfes3cr3t\xe2\x82"  # \xe2\x82 is a character cut short
# containerd writes the OCI spec as JSON: one U+FFFD per byte that is not UTF-8, with or without the proxy.
SHOWN_SECRET = "\ufffd\ufffds3cr3t\ufffd\ufffd"
SECRET_SEEN = (["PLAIN=text", f"SECRET={SHOWN_SECRET}"], SHOWN_SECRET.encode())


def binary_env_seen(client: CriClient, log_dir: Path, cleanup: list[str]) -> tuple[list[str], bytes]:
    """The OCI spec's PLAIN and SECRET entries and what the container's shell prints for $SECRET."""
    pod_config = client.pod_config("binary-env", log_dir)
    pod_id = client.run_pod(pod_config)
    cleanup.append(pod_id)
    container_id = client.create_container(
        pod_id, client.container_config("box", envs={"PLAIN": "text", "SECRET": SECRET}), pod_config)
    client.start_container(container_id)
    spec = json.loads(client.container_status(container_id, verbose=True).info["info"])["runtimeSpec"]
    printed = client.exec_sync(container_id, ["sh", "-c", 'printf %s "$SECRET"']).stdout
    return [entry for entry in spec["process"]["env"] if entry.startswith(("PLAIN=", "SECRET="))], printed
