"""rplab.cluster: the certificates the fixture makes, its kubeconfigs, the CRD and pod helpers (no processes)."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from rplab.cluster import USERS, ClusterError, established, kubeconfig, make_pki, resource_path, running


def subject(certificate: Path) -> str:
    return subprocess.run(["openssl", "x509", "-in", str(certificate), "-noout", "-subject", "-nameopt", "compat"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_pki_signs_a_serving_certificate_for_loopback_and_a_client_certificate_per_user(tmp_path: Path) -> None:
    make_pki(tmp_path)
    for name in ("apiserver", *USERS):
        verified = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"),
                                   str(tmp_path / f"{name}.crt")], capture_output=True, text=True)
        assert verified.returncode == 0, verified.stderr
    assert subject(tmp_path / "node.crt") == "subject=/O=system:nodes/CN=system:node:rplab-node"
    assert subject(tmp_path / "admin.crt") == f"subject={USERS['admin']}"
    served = subprocess.run(["openssl", "x509", "-in", str(tmp_path / "apiserver.crt"), "-noout", "-ext",
                             "subjectAltName"], capture_output=True, text=True, check=True).stdout
    assert "IP Address:127.0.0.1" in served
    assert (tmp_path / "sa.key").is_file() and (tmp_path / "sa.pub").is_file()


def test_a_kubeconfig_names_the_server_the_ca_and_the_users_certificate(tmp_path: Path) -> None:
    config = kubeconfig("https://127.0.0.1:6443", tmp_path, "node")
    assert config["clusters"][0]["cluster"] == {"server": "https://127.0.0.1:6443",
                                                "certificate-authority": str(tmp_path / "ca.crt")}
    assert config["users"][0]["user"]["client-certificate"] == str(tmp_path / "node.crt")
    assert config["current-context"] == config["contexts"][0]["name"]


def test_an_embedded_kubeconfig_carries_the_certificates_themselves(tmp_path: Path) -> None:
    for name in ("ca.crt", "node.crt", "node.key"):
        (tmp_path / name).write_text(f"PEM of {name}\n")
    config = kubeconfig("https://127.0.0.1:6443", tmp_path, "node", embedded=True)
    assert base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"]) == b"PEM of ca.crt\n"
    assert {key: base64.b64decode(value) for key, value in config["users"][0]["user"].items()} == {
        "client-certificate-data": b"PEM of node.crt\n", "client-key-data": b"PEM of node.key\n"}
    assert str(tmp_path) not in json.dumps(config)


def test_a_crds_objects_are_listed_at_its_storage_version() -> None:
    crd = {"spec": {"group": "slo.koordinator.sh", "names": {"plural": "nodeslos"},
                    "versions": [{"name": "v1beta1", "storage": False}, {"name": "v1alpha1", "storage": True}]}}
    assert resource_path(crd) == "/apis/slo.koordinator.sh/v1alpha1/nodeslos"
    assert established({"status": {"conditions": [{"type": "Established", "status": "True"}]}})
    assert not established({"status": {}})


def test_running_waits_for_the_phase_and_a_failed_pod_is_an_error() -> None:
    assert running({"metadata": {"name": "p"}, "status": {"phase": "Pending"}}) is None
    pod = {"metadata": {"name": "p"}, "status": {"phase": "Running"}}
    assert running(pod) is pod
    with pytest.raises(ClusterError, match="pod p failed"):
        running({"metadata": {"name": "p"}, "status": {"phase": "Failed"}})
