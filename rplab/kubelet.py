"""The kubelet's side of a pod's life, played by the kubelet's own CRI client library: the ``crilifecycle`` peer.

``peers/crilifecycle`` (Go, ``k8s.io/cri-client`` at the version peers/go.mod pins) runs what a kubelet sends over a
host-network pod with one container of the lab's busybox: Version, Status, RuntimeConfig, ImageFsInfo, ImageStatus
(and PullImage by the pull policy), RunPodSandbox, CreateContainer (one env value not UTF-8), StartContainer,
ContainerStatus (verbose), ExecSync, the filtered List and stats calls (``streaming``: the client tries the Stream*
calls first and falls back on UNIMPLEMENTED), UpdateContainerResources, StopContainer, RemoveContainer,
StopPodSandbox, RemovePodSandbox. Its answer is one JSON document: every step's answer or error, and the gRPC
calls the client made for it, with IDs, names, times, pids and counters replaced by placeholders, so two runs
(directly against a runtime, and through the proxy) compare with ``==``. The peer removes its pod whatever happens.

    python -m rplab.kubelet --endpoint SOCKET --log-dir DIR [--streaming] [--no-binary-env]   # prints the document;
                                                    # exit 1 if a step failed (containerd 1.6's RuntimeConfig aside)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rplab.differential import differing_paths
from rplab.images import BUSYBOX_IMAGE
from rplab.peers import peer_binary
from runtimeproxy.usage import OneLineParser

PEER = "crilifecycle"
RUN_TIMEOUT_SECONDS = 300
# The one env value of the container that is not UTF-8, and what the container gets for it: containerd writes
# the OCI spec as JSON, which turns each bad byte into U+FFFD (ef bf bd).
BINARY_ENV_KEY = "RP_BINARY_ENV"
BINARY_ENV_SENT = b"fo\xff\xfeo"
BINARY_ENV_IN_CONTAINER = BINARY_ENV_SENT.decode(errors="replace").encode()
# containerd 1.6.20 has no RuntimeConfig (the kubelet then keeps its configured cgroup driver).
# Calls a runtime may leave unimplemented, which the kubelet copes with: containerd 1.6 and 1.7 have no
# RuntimeConfig (2.x has), containerd before 2.2 no UpdatePodSandboxResources (an in-place pod resize).
OPTIONAL_CALLS = frozenset({"RuntimeConfig", "UpdatePodSandboxResources"})


class LifecycleError(RuntimeError):
    """The driver could not run at all (it could not connect, or it was given bad flags)."""


@dataclass(frozen=True)
class Lifecycle:
    """One run's document: ``steps`` (each ``{"step", "label", "answer" | "error", "wire"}``), ``binary_env``."""

    document: dict[str, Any]

    @property
    def steps(self) -> list[dict[str, Any]]:
        return self.document["steps"]

    @property
    def binary_env(self) -> dict[str, str]:
        """Hex of the env value not UTF-8: as sent, as in the OCI spec, as the container's ``env`` printed it."""
        return self.document["binary_env"]

    def step(self, name: str, label: str = "") -> dict[str, Any]:
        """The first step called ``name`` (whose label starts with ``label``)."""
        return next(s for s in self.steps if s["step"] == name and s.get("label", "").startswith(label))

    def failed(self) -> dict[str, dict[str, str]]:
        """``{"Step[label]": error}`` for every step that failed."""
        return {f"{s['step']}[{s.get('label', '')}]": s["error"] for s in self.steps if "error" in s}

    def unexpected_failures(self) -> dict[str, dict[str, str]]:
        """``failed()`` without the optional calls the runtime does not implement."""
        return {name: error for name, error in self.failed().items() if name.split("[")[0] not in OPTIONAL_CALLS}

    def container_env(self) -> list[str]:
        """The container's env as ``env`` printed it inside (ExecSync)."""
        return str(self.step("ExecSync", "env")["answer"]["stdout"]).split()

    def running_container(self) -> dict[str, Any]:
        """ContainerStatus of the running container, verbose: ``status``, and containerd's ``info`` (the OCI spec
        under ``info.info.runtimeSpec``)."""
        return self.step("ContainerStatus", "running")["answer"]

    def called(self) -> list[str]:
        """Every gRPC method the client called, in order (``RuntimeService/ListPodSandbox``, ...)."""
        return [call["method"] for s in self.steps for call in s["wire"]]

    def by_name(self) -> dict[str, dict[str, Any]]:
        """``{"Step[label]": step}`` (every step's name and label are distinct)."""
        return {f"{s['step']}[{s.get('label', '')}]": s for s in self.steps}


def differences(expected: Lifecycle, got: Lifecycle) -> list[str]:
    """Where two runs' documents differ, one line per differing value (``Step[label].path: a != b``); a step
    one run made and the other did not is one line too."""
    mine, theirs = expected.by_name(), got.by_name()
    found = [f"{name}: only in the first run" for name in mine if name not in theirs]
    found += [f"{name}: only in the second run" for name in theirs if name not in mine]
    found += [f"{name}.{line}"
              for name in mine if name in theirs for line in differing_paths(mine[name], theirs[name])]
    found += [f"binary_env: {line}" for line in differing_paths(expected.binary_env, got.binary_env)]
    return found


def run_lifecycle(endpoint: str | Path, log_dir: Path, *, pod_name: str, streaming: bool = False,
                  binary_env: bool = True, image: str = BUSYBOX_IMAGE, pull_policy: str = "IfNotPresent",
                  extra_args: Sequence[str] = ()) -> Lifecycle:
    """Run the driver against ``endpoint`` (a CRI socket) with a pod called ``pod_name`` (distinct per run:
    it becomes ``<pod-name>`` in the answers, so it must not occur in them otherwise); ``binary_env``: the
    container's env has the value that is not UTF-8."""
    target = str(endpoint) if str(endpoint).startswith("unix://") else f"unix://{endpoint}"
    argv = [str(peer_binary(PEER)), f"-endpoint={target}", f"-image={image}", f"-log-dir={log_dir}",
            f"-pod-name={pod_name}", f"-pull-policy={pull_policy}", f"-streaming={str(streaming).lower()}",
            f"-binary-env={str(binary_env).lower()}",
            *extra_args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_SECONDS)
    if done.returncode != 0:
        raise LifecycleError(f"{PEER} exited {done.returncode}: {done.stderr.strip()[-3000:]}")
    return Lifecycle(json.loads(done.stdout))


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m rplab.kubelet", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoint", required=True, help="a CRI socket (containerd's, or the proxy's)")
    parser.add_argument("--log-dir", required=True, type=Path, help="the pod's log directory")
    parser.add_argument("--pod-name", default="crilifecycle")
    parser.add_argument("--image", default=BUSYBOX_IMAGE)
    parser.add_argument("--streaming", action="store_true", help="the client's streaming list calls")
    parser.add_argument("--binary-env", action=argparse.BooleanOptionalAction, default=True,
                        help="give the container the env value that is not UTF-8 (default: yes)")
    args = parser.parse_args(argv)
    lifecycle = run_lifecycle(args.endpoint, args.log_dir, pod_name=args.pod_name, streaming=args.streaming,
                              binary_env=args.binary_env, image=args.image)
    json.dump(lifecycle.document, sys.stdout, indent=2)
    print()
    return 1 if lifecycle.unexpected_failures() else 0


if __name__ == "__main__":
    raise SystemExit(main())
