"""A small real cluster on loopback for koordlet: etcd and kube-apiserver (the compiled peers "etcd" and
"kube-apiserver"), their certificates, kubeconfigs for an admin and a node, koordinator's CRDs, and a small client.

``SmallCluster(directory)``: ``start()`` (etcd, then the API server once its certificates are made, then the CRDs
applied and established), ``client`` (a ``ClusterClient``: JSON over HTTPS with the admin's certificate),
``kubeconfig(user)`` (``admin``, or ``node`` for a kubelet registered as NODE_NAME), ``stop()``. Everything it writes
is in ``directory``; it listens on 127.0.0.1 only, on free ports. There is no controller manager and no scheduler:
pods are created with ``spec.nodeName`` set, as the scheduler would bind them, and the ServiceAccount admission
plugin is off (nothing would create the ``default`` service account or its tokens).

Certificates are made with Debian's ``openssl`` command (a CA, the API server's serving certificate for
127.0.0.1, client certificates for ``admin`` in ``system:masters`` and ``system:node:<node>`` in ``system:nodes``,
the service-account key pair): the project has no Python crypto dependency, and openssl is on every node.

koordinator's CRDs (NodeSLO, NodeMetric, NodeResourceTopology, …) are read at run time from the koordinator module
in the Go module cache (its ``config/crd/bases``), the version the koordlet consumer module pins: nothing of them
is kept in the repository.

    python -m rplab.cluster [--dir DIR]   # starts the cluster, prints its kubeconfigs, waits for Ctrl-C
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import yaml

from rplab.consumer_modules import KOORDINATOR_VERSION, MODULES, go_environment
from rplab.gotoolchain import go_toolchain
from rplab.kubelet_node import NODE_NAME, KubeletNodeError, seconds_since, wait_until
from rplab.peers import peer_binary
from rplab.process import end_process
from rplab.registry import free_port

LOOPBACK = "127.0.0.1"
SERVICE_RANGE = "10.96.0.0/24"
START_TIMEOUT_SECONDS = 90.0
STOP_TIMEOUT_SECONDS = 15.0
CERT_DAYS = 2
KOORDINATOR_MODULE = MODULES["koordlet"].upstream

T = TypeVar("T")


class ClusterError(RuntimeError):
    pass


# -- certificates (openssl) ------------------------------------------------------------------------------------


def openssl(*arguments: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *arguments], cwd=cwd, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise ClusterError(f"openssl {' '.join(arguments)} failed: {done.stderr.strip()[-1000:]}")


def make_ca(pki: Path) -> None:
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
            "-days", str(CERT_DAYS), "-subj", "/CN=rplab-cluster-ca", cwd=pki)


def make_certificate(pki: Path, name: str, subject: str, extensions: str) -> None:
    """``name``.crt/.key signed by the CA, with the ``extensions`` (openssl's x509v3 config lines)."""
    (pki / f"{name}.ext").write_text(extensions + "\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", subject, cwd=pki)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", str(CERT_DAYS), "-extfile", f"{name}.ext", cwd=pki)


CLIENT_EXTENSIONS = "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth"
SERVER_EXTENSIONS = ("keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
                     "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,"
                     "DNS:kubernetes.default,DNS:kubernetes.default.svc")
# kubeconfig user -> (certificate name, subject): the admin is in system:masters; the node is what the Node
# authorizer and NodeRestriction expect of a kubelet.
USERS = {"admin": "/O=system:masters/CN=rplab-admin", "node": f"/O=system:nodes/CN=system:node:{NODE_NAME}"}


def make_pki(pki: Path) -> None:
    """The CA, the API server's serving certificate, a client certificate per user, the service-account keys."""
    pki.mkdir(parents=True, exist_ok=True)
    make_ca(pki)
    make_certificate(pki, "apiserver", "/CN=kube-apiserver", SERVER_EXTENSIONS)
    for user, subject in USERS.items():
        make_certificate(pki, user, subject, CLIENT_EXTENSIONS)
    openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def kubeconfig(server: str, pki: Path, user: str, embedded: bool = False) -> dict[str, Any]:
    """``user``'s kubeconfig; ``embedded``: the certificates in it (for a machine without ``pki``: a guest), else
    their paths."""
    files = {"certificate-authority": pki / "ca.crt", "client-certificate": pki / f"{user}.crt",
             "client-key": pki / f"{user}.key"}
    entries = {f"{key}-data": base64.b64encode(path.read_bytes()).decode() for key, path in files.items()} \
        if embedded else {key: str(path) for key, path in files.items()}
    authority = "certificate-authority-data" if embedded else "certificate-authority"
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "rplab",
        "clusters": [{"name": "rplab", "cluster": {"server": server, authority: entries.pop(authority)}}],
        "users": [{"name": user, "user": entries}],
        "contexts": [{"name": "rplab", "context": {"cluster": "rplab", "user": user}}],
    }


# -- koordinator's CRDs ------------------------------------------------------------------------------------------


def koordinator_crds(version: str = KOORDINATOR_VERSION) -> list[dict[str, Any]]:
    """Every CRD of koordinator's ``config/crd/bases`` at ``version``, from the Go module cache (downloaded into it
    when missing, as the koordlet build does)."""
    with tempfile.TemporaryDirectory(prefix="rp-crds-") as scratch:
        Path(scratch, "go.mod").write_text("module scratch\n")
        done = subprocess.run([str(go_toolchain()), "mod", "download", "-json", f"{KOORDINATOR_MODULE}@{version}"],
                              cwd=scratch, env=go_environment(), capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise ClusterError(f"cannot download {KOORDINATOR_MODULE}@{version}: {done.stdout[-500:]}{done.stderr[-500:]}")
    bases = Path(json.loads(done.stdout)["Dir"]) / "config" / "crd" / "bases"
    documents = [document for path in sorted(bases.glob("*.yaml"))
                 for document in yaml.safe_load_all(path.read_text()) if document]
    if not documents:
        raise ClusterError(f"no CRDs in {bases}")
    return documents


# -- the client --------------------------------------------------------------------------------------------------


@dataclass
class ClusterClient:
    """JSON over HTTPS with a client certificate: what ``kubectl apply`` / ``get`` / ``delete`` send. Plain
    ``urllib``: the few calls the tests make do not justify the official client's dependency tree."""

    server: str
    pki: Path
    user: str = "admin"
    _context: ssl.SSLContext | None = field(default=None, repr=False)

    @property
    def context(self) -> ssl.SSLContext:
        if self._context is None:
            self._context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
            self._context.load_cert_chain(str(self.pki / f"{self.user}.crt"), str(self.pki / f"{self.user}.key"))
        return self._context

    def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                content_type: str = "application/json", timeout: float = 30) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        sent = urllib.request.Request(self.server + path, data=data, method=method,
                                      headers={"Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(sent, context=self.context, timeout=timeout) as answer:
                text = answer.read()
        except urllib.error.HTTPError as error:
            raise ClusterError(f"{method} {path}: {error.code} {error.read().decode(errors='replace')[:500]}") \
                from error
        return json.loads(text) if text.strip().startswith(b"{") else {"text": text.decode()}

    def get(self, path: str) -> dict[str, Any]:
        return self.request("GET", path)

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
        except ClusterError as error:
            if ": 404 " in str(error):
                return False
            raise
        return True

    def create(self, collection: str, document: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", collection, document)

    def patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", path, patch, content_type="application/merge-patch+json")

    def delete(self, path: str, grace_seconds: int | None = None) -> dict[str, Any]:
        body = None if grace_seconds is None else {"gracePeriodSeconds": grace_seconds}
        return self.request("DELETE", path, body)

    def create_pod(self, pod: dict[str, Any], timeout: float = START_TIMEOUT_SECONDS) -> dict[str, Any]:
        """Creates ``pod`` (its ``spec.nodeName`` set: there is no scheduler) and returns it once Running."""
        namespace = pod["metadata"].get("namespace", "default")
        self.create(f"/api/v1/namespaces/{namespace}/pods", pod)
        path = f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}"
        return wait_for(lambda: running(self.get(path)), timeout, f"pod {pod['metadata']['name']} to run")

    def wait_for_node(self, name: str, timeout: float = START_TIMEOUT_SECONDS) -> dict[str, Any]:
        """The Node object once the kubelet has registered it."""
        path = f"/api/v1/nodes/{name}"
        return wait_for(lambda: self.get(path) if self.exists(path) else None, timeout, f"node {name} to register")

    def delete_pod(self, name: str, namespace: str = "default", timeout: float = START_TIMEOUT_SECONDS) -> None:
        """Deletes the pod and waits until the kubelet has stopped it and the API server forgot it."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        self.delete(path)
        wait_for(lambda: not self.exists(path), timeout, f"pod {name} to be gone")

    def apply_crds(self, crds: list[dict[str, Any]]) -> None:
        """Creates each CRD (an existing one is left as it is) and waits until each is established and its
        objects can be listed (the API server answers 429 while its storage for a new resource initializes)."""
        collection = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        for crd in crds:
            if not self.exists(f"{collection}/{crd['metadata']['name']}"):
                self.create(collection, crd)
        for crd in crds:
            name = crd["metadata"]["name"]
            wait_for(lambda: established(self.get(f"{collection}/{name}")), START_TIMEOUT_SECONDS,
                     f"CRD {name} to be established")
            wait_for(lambda: self.lists(resource_path(crd)), START_TIMEOUT_SECONDS, f"{name} to be served")

    def lists(self, path: str) -> bool:
        try:
            self.get(path)
        except ClusterError as error:
            if ": 429 " in str(error):
                return False
            raise
        return True


def resource_path(crd: dict[str, Any]) -> str:
    """The path that lists a CRD's objects (in every namespace), at its storage version."""
    spec = crd["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("storage"))
    return f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"


def running(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod when it is Running, else None; a ClusterError when it has failed."""
    phase = pod.get("status", {}).get("phase")
    if phase == "Failed":
        raise ClusterError(f"pod {pod['metadata']['name']} failed: {json.dumps(pod['status'])[:800]}")
    return pod if phase == "Running" else None


def established(crd: dict[str, Any]) -> bool:
    conditions = crd.get("status", {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def wait_for(condition: Callable[[], T | None], timeout: float, what: str) -> T:
    """kubelet_node's wait, its timeout a ClusterError."""
    try:
        return wait_until(condition, timeout, what)
    except KubeletNodeError as error:
        raise ClusterError(str(error)) from error


# -- the processes -----------------------------------------------------------------------------------------------


@dataclass
class Daemon:
    """One process of the cluster, its output in ``log``."""

    name: str
    argv: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                            start_new_session=True)

    def check_running(self) -> None:
        if self.process is None or self.process.poll() is not None:
            code = self.process.returncode if self.process else None
            raise ClusterError(f"{self.name} exited with {code}\n{self.log_tail()}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            end_process(process, STOP_TIMEOUT_SECONDS)

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return f"(no {self.name} log)"
        return f"{self.name} log tail:\n" + "\n".join(text.splitlines()[-lines:])


@dataclass
class SmallCluster:
    """etcd and kube-apiserver on loopback, everything of them in ``directory``."""

    directory: Path
    etcd_port: int = 0
    apiserver_port: int = 0
    figures: dict[str, float] = field(default_factory=dict)
    daemons: list[Daemon] = field(default_factory=list)
    _client: ClusterClient | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.directory = Path(self.directory).absolute()

    @property
    def pki(self) -> Path:
        return self.directory / "pki"

    @property
    def server(self) -> str:
        return f"https://{LOOPBACK}:{self.apiserver_port}"

    @property
    def client(self) -> ClusterClient:
        if self._client is None:
            self._client = ClusterClient(self.server, self.pki)
        return self._client

    def kubeconfig(self, user: str = "admin") -> Path:
        """The kubeconfig file of ``user`` (``admin`` or ``node``)."""
        path = self.directory / f"{user}.kubeconfig"
        if not path.exists():
            path.write_text(json.dumps(kubeconfig(self.server, self.pki, user), indent=1))  # JSON is YAML
        return path

    def embedded_kubeconfig(self, user: str, server: str) -> Path:
        """``user``'s kubeconfig for another machine (a guest) that reaches the API server at ``server``
        (``https://127.0.0.1:PORT``: the serving certificate names 127.0.0.1), its certificates embedded."""
        path = self.directory / f"{user}-embedded.kubeconfig"
        path.write_text(json.dumps(kubeconfig(server, self.pki, user, embedded=True), indent=1))
        return path

    def etcd_argv(self, peer_port: int) -> list[str]:
        client_url, peer_url = f"http://{LOOPBACK}:{self.etcd_port}", f"http://{LOOPBACK}:{peer_port}"
        return [str(peer_binary("etcd")), "--name=rplab", f"--data-dir={self.directory / 'etcd'}",
                f"--listen-client-urls={client_url}", f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=rplab={peer_url}", "--unsafe-no-fsync", "--log-level=warn"]

    def apiserver_argv(self) -> list[str]:
        pki = self.pki
        return [str(peer_binary("kube-apiserver")), f"--etcd-servers=http://{LOOPBACK}:{self.etcd_port}",
                f"--bind-address={LOOPBACK}", f"--advertise-address={LOOPBACK}",
                f"--secure-port={self.apiserver_port}", f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}", f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-cluster-ip-range={SERVICE_RANGE}", "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction", "--disable-admission-plugins=ServiceAccount",
                "--allow-privileged=true", "--profiling=false", "--v=1"]

    def start(self, timeout: float = START_TIMEOUT_SECONDS) -> None:
        """etcd, the API server, the CRDs; returns once the API server is ready and the CRDs established."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for peer in ("etcd", "kube-apiserver"):
            peer_binary(peer)  # built (on first use) before the clock starts
        crds = koordinator_crds()
        started = time.monotonic()
        make_pki(self.pki)
        self.figures["certificates s"] = seconds_since(started)
        self.etcd_port, peer_port, self.apiserver_port = free_port(LOOPBACK), free_port(LOOPBACK), free_port(LOOPBACK)
        try:
            self._start_daemon("etcd", self.etcd_argv(peer_port))
            wait_for(self._etcd_healthy, timeout, "etcd's /health")
            self._start_daemon("kube-apiserver", self.apiserver_argv())
            wait_for(self._apiserver_ready, timeout, "kube-apiserver's /readyz")
            self.figures["api server ready s"] = seconds_since(started)
            self.client.apply_crds(crds)
            self.figures["crds established s"] = seconds_since(started)
        except BaseException:
            self.stop()
            raise

    def _start_daemon(self, name: str, argv: list[str]) -> None:
        daemon = Daemon(name, argv, self.directory / f"{name}.log")
        daemon.start()
        self.daemons.append(daemon)

    def _check_running(self) -> None:
        for daemon in self.daemons:
            daemon.check_running()

    def _etcd_healthy(self) -> bool:
        self._check_running()
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{self.etcd_port}/health", timeout=2) as answer:
                return bool(json.load(answer).get("health") == "true")
        except (OSError, ValueError):
            return False

    def _apiserver_ready(self) -> bool:
        self._check_running()
        try:
            return self.client.get("/readyz").get("text", "").strip() == "ok"
        except (ClusterError, OSError):
            return False

    def stop(self) -> None:
        """The API server, then etcd; their files stay in ``directory`` (the caller removes it)."""
        for daemon in reversed(self.daemons):
            daemon.stop()
        self.daemons.clear()

    def log_tails(self) -> str:
        return "\n".join(daemon.log_tail() for daemon in self.daemons)

    def __enter__(self) -> SmallCluster:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rplab.cluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, help="the cluster's directory (default: a temporary one, removed after)")
    args = parser.parse_args(argv)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="rplab-cluster-", dir="/tmp"))
    try:
        with SmallCluster(directory) as cluster:
            print(json.dumps({"server": cluster.server, "admin": str(cluster.kubeconfig("admin")),
                              "node": str(cluster.kubeconfig("node")), **cluster.figures}, indent=1), flush=True)
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
    except ClusterError as error:
        print(f"rplab.cluster: {error}", file=sys.stderr)
        return 1
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.umask(0o077)
    raise SystemExit(main())
