"""koordinator's own ``koord-runtime-proxy`` as a lab and test peer: the program this project replaces, run beside it.

The Go binary is the peer ``koord-runtime-proxy`` (rplab.peers, built from the consumer module peers/koordinator).
It has five flags (its socket, the runtime's socket, the backend mode, the skip label's key and value: no image
endpoint, no log level) and reads its plugin registrations from the hard-coded ``/etc/runtime/hookserver.d``,
which it creates when missing. So it runs in a private mount namespace (``unshare -m --propagation private``):
there an overlay over ``/etc`` (upper and work directories in the peer's own directory) gives it that path without
creating anything on the host, and the peer's own hook directory is bind-mounted onto it. The namespace and its
mounts end with the process: nothing is left on the host. It serves CRI runtime.v1 only (v1alpha2 and the image
service pass through untouched) and has no health service: it is ready when a Version call through it answers.

    python -m rplab.koord_proxy --runtime CONTAINERD_SOCKET --socket PATH [--hook-dir DIR]   # until Ctrl-C
"""

from __future__ import annotations

import argparse
import shutil
import signal
from pathlib import Path

import grpc

from rplab.cri import CriClient
from rplab.peers import peer_binary
from rplab.process import ProxyProcess, ProxyProcessError
from runtimeproxy.usage import OneLineParser

PEER = "koord-runtime-proxy"
HOOK_DIR = Path("/etc/runtime/hookserver.d")  # koordinator's, hard-coded
# Logged when it (re)reads a registration file: "update config for <path> &{...}".
REGISTERED = "update config for "
# In the namespace: /etc overlaid (upper, work), the hook directory bound onto HOOK_DIR, then the proxy itself.
_NAMESPACE_SCRIPT = (
    'set -e; mount -t overlay koord-etc -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc; '
    f'mkdir -p {HOOK_DIR}; mount --bind "$3" {HOOK_DIR}; shift 3; exec "$@"'
)


class KoordProxyProcess(ProxyProcess):
    """koord-runtime-proxy listening on ``listen_path`` in front of the CRI socket ``runtime_path``; its plugin
    registrations are the files of ``hook_config_dir`` (default: ``hookserver.d`` beside the socket), seen by it
    as ``/etc/runtime/hookserver.d``. Started, stopped and logged as ``ProxyProcess``."""

    def __init__(self, listen_path: Path, runtime_path: Path | str, *, hook_config_dir: Path | None = None,
                 extra_args: list[str] | None = None, binary: Path | None = None) -> None:
        """``binary``: the Go program (default: the peer, built on first use)."""
        super().__init__(listen_path, runtime_path, hook_config_dir=hook_config_dir, extra_args=extra_args,
                         command=[str(binary or peer_binary(PEER))])
        self.overlay_dir = listen_path.parent / "etc-overlay"

    @property
    def argv(self) -> list[str]:
        upper, work = self.overlay_dir / "upper", self.overlay_dir / "work"
        return ["unshare", "-m", "--propagation", "private", "sh", "-c", _NAMESPACE_SCRIPT, "sh",
                str(upper), str(work), str(self.hook_config_dir), *self.command,
                f"--koord-runtimeproxy-endpoint={self.listen_path}",
                f"--remote-runtime-service-endpoint={self.runtime_path}", *self.extra_args]

    def spawn(self) -> None:
        if shutil.which("unshare") is None:
            raise ProxyProcessError("koord-runtime-proxy needs unshare (util-linux) for its private mount namespace")
        shutil.rmtree(self.overlay_dir, ignore_errors=True)  # a fresh overlay per start
        for directory in (self.overlay_dir / "upper", self.overlay_dir / "work"):
            directory.mkdir(parents=True)
        super().spawn()

    def ready(self, channel: grpc.Channel, wait_serving: bool) -> bool:
        """A Version call through it answers (it has no health service)."""
        client = CriClient(channel)
        client.runtime.Version(client.api.VersionRequest(), timeout=1)
        return True

    @staticmethod
    def registered_line(name: str) -> str:
        """What its log says when it has read the registration file ``name``."""
        return f"{REGISTERED}{HOOK_DIR / name} "


def host_traces() -> list[str]:
    """What of the peer would show on the host: ``/etc/runtime``, and mounts of its namespace (none, once it ended)."""
    found = [str(HOOK_DIR.parent)] if HOOK_DIR.parent.exists() else []
    with open("/proc/self/mountinfo") as mounts:
        found += [line.strip() for line in mounts if "koord-etc" in line or str(HOOK_DIR) in line]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m rplab.koord_proxy", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtime", required=True, help="the CRI socket it forwards to (containerd's)")
    parser.add_argument("--socket", required=True, type=Path, help="the socket it listens on")
    parser.add_argument("--hook-dir", type=Path, help="its plugin registrations (default: hookserver.d beside --socket)")
    args = parser.parse_args(argv)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})  # for sigwait below
    proxy = KoordProxyProcess(args.socket, args.runtime, hook_config_dir=args.hook_dir)
    proxy.start()
    print(f"{PEER} on {proxy.listen_path} in front of {args.runtime}; registrations in {proxy.hook_config_dir}; "
          f"log {proxy.log_path}", flush=True)
    try:
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        code = proxy.stop()
    return code


if __name__ == "__main__":
    raise SystemExit(main())
