"""The registration file a plugin drops into the proxy's config dir (docs/plugins.md, "Registering").

One JSON file per plugin: its socket, the hooks it wants, its failure policy and per-call timeout.
`write_registration` writes it atomically (a temporary name the proxy ignores, then a rename) with mode
0644: the proxy ignores a file that is writable by group or others, or owned by an untrusted uid.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import orjson

REGISTRATION_MODE = 0o644
POLICIES = ("Ignore", "Fail")


def registration(socket_path: Path, hooks: Sequence[str], policy: str = "Ignore",
                 timeout: float | None = None, shadow: bool = False) -> bytes:
    """The JSON document that registers a plugin serving on `socket_path` for `hooks` (`shadow`: on trial,
    called but never applied)."""
    document: dict[str, object] = {"remote-endpoint": str(socket_path), "failure-policy": policy,
                                   "runtime-hooks": list(hooks)}
    if timeout is not None:
        document["timeout-seconds"] = timeout
    if shadow:
        document["shadow"] = True
    return orjson.dumps(document, option=orjson.OPT_INDENT_2)


def write_registration(path: Path, document: bytes) -> None:
    """Write a registration file atomically, mode 0644 (the proxy polls the directory)."""
    temporary = path.with_name(f".{path.name}.tmp")  # not *.json: the proxy never reads it half-written
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, REGISTRATION_MODE), "wb") as file:
        file.write(document + b"\n")
    os.chmod(temporary, REGISTRATION_MODE)  # whatever the umask
    os.replace(temporary, path)
