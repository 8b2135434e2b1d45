"""NRI seccomp policies on containerd 1.6: a CRI request names a profile, never a policy, so a plugin's policy
travels as a Localhost profile file of the proxy's.

containerd 1.6 (contrib/seccomp's WithProfile) reads a Localhost profile once, at CreateContainer, as OCI's
LinuxSeccomp JSON into the container's spec. So the proxy writes the policy to a file of its own
(`<state dir>/seccomp/`, mode 0600, one per create), points the request's `security_context.seccomp` at it,
and removes the file once the create has returned (the spec keeps the policy).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from types import TracebackType

SUBDIRECTORY = "seccomp"


class ProfileFiles:
    """The profile files of one CreateContainer; removed when the block ends."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.written: list[Path] = []

    def write(self, policy: str) -> str:
        """The absolute path of a new file holding `policy`."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor, name = tempfile.mkstemp(prefix="nri-", suffix=".json", dir=self.directory)
        self.written.append(Path(name))
        with os.fdopen(descriptor, "w") as file:
            file.write(policy)
        return str(Path(name).resolve())

    def __enter__(self) -> ProfileFiles:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        for path in self.written:
            path.unlink(missing_ok=True)
