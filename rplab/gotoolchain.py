"""The machine's Go toolchain, for the compiled peers (rplab.peers), the consumer modules (rplab.consumer_modules)
and the runtimes built with Go (rplab.runtimes)."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

MODULE = Path(__file__).resolve().parent.parent / "peers"
# Where the machine's Go is when it is not on PATH (the toolchain tarball's usual place).
GO_FALLBACKS = (Path("/usr/local/go/bin/go"), Path("/usr/lib/go/bin/go"))
BUILD_TIMEOUT_SECONDS = 1800
# Go 1.21 is the first that fetches the toolchain a go.mod names (GOTOOLCHAIN=auto).
MIN_GO_MINOR = 21
GO_INSTALL_HINT = ("The compiled peers need a Go: Debian's golang-go (scripts/setup.sh installs it; before 1.21 it is "
                   "used once to download the toolchain peers/go.mod names), or Go's release unpacked in /usr/local.")


class GoToolchainError(RuntimeError):
    pass


def go_toolchain() -> Path:
    """The machine's ``go``: on PATH, else where a toolchain is usually unpacked. Go 1.21 and later fetch the
    toolchain peers/go.mod names by themselves (GOTOOLCHAIN); an older one (Debian 12's golang-go is 1.19) is used
    once to download that toolchain from the Go module proxy (bootstrapped_toolchain)."""
    found = shutil.which("go")
    candidates = [Path(found)] if found else [c for c in GO_FALLBACKS if c.is_file()]
    if not candidates:
        raise GoToolchainError(f"Go not found (on PATH, {', '.join(map(str, GO_FALLBACKS))}). {GO_INSTALL_HINT}")
    go = candidates[0]
    version = subprocess.run([str(go), "version"], capture_output=True, text=True, check=False).stdout
    release = re.search(r"go1\.(\d+)", version)
    if release is None:
        raise GoToolchainError(f"{go} is {version.strip() or 'not a working Go'}. {GO_INSTALL_HINT}")
    if int(release.group(1)) < MIN_GO_MINOR:
        return bootstrapped_toolchain(go)
    return go


def bootstrapped_toolchain(old_go: Path, module: Path = MODULE) -> Path:
    """The Go toolchain peers/go.mod's `go` line names, as the module golang.org/toolchain the Go module proxy
    serves, downloaded by `old_go` (which predates toolchain switching) into its module cache; made executable
    as Go's own switching does (a module's files carry no modes)."""
    wanted = re.search(r"^go (\d+\.\d+(?:\.\d+)?)$", (module / "go.mod").read_text(), re.M)
    if wanted is None:
        raise GoToolchainError(f"{module}/go.mod has no go line")
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    toolchain = f"golang.org/toolchain@v0.0.1-go{wanted.group(1)}.linux-{arch}"
    with tempfile.TemporaryDirectory(prefix="rp-go-bootstrap-") as work:
        Path(work, "go.mod").write_text("module bootstrap\n")
        done = subprocess.run([str(old_go), "mod", "download", "-json", toolchain], cwd=work, capture_output=True,
                              text=True, timeout=BUILD_TIMEOUT_SECONDS,
                              env={**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"})
    if done.returncode != 0:
        raise GoToolchainError(f"{old_go} could not download {toolchain}: {(done.stdout + done.stderr)[-2000:]}. "
                             f"{GO_INSTALL_HINT}")
    root = Path(json.loads(done.stdout)["Dir"])
    for tool in [*root.glob("bin/*"), *root.glob("pkg/tool/*/*")]:
        tool.chmod(tool.stat().st_mode | 0o555)
    return root / "bin" / "go"
