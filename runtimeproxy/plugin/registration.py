"""The registration file a plugin drops into the proxy's config dir (docs/plugins.md, "Registering").

One JSON file per plugin: its socket, the hooks it wants, its failure policy and per-call timeout.
`write_registration` writes it atomically (a temporary name the proxy ignores, then a rename) with mode
0644: the proxy ignores a file that is writable by group or others, or owned by an untrusted uid. A missing
directory is created 0755 whatever the umask; one writable by group or others is refused (the proxy would
ignore every file in it, runtimeproxy.trust): a `RegistrationError`, one line naming the fix.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import orjson

from runtimeproxy.hooks.config import is_config_name
from runtimeproxy.options import DEFAULT_HOOK_CONFIG_DIR

REGISTRATION_MODE = 0o644
REGISTRATION_DIR_MODE = 0o755
_GROUP_OR_OTHER_WRITE = 0o022
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


class RegistrationError(Exception):
    """The registration cannot be written where the proxy would read it (one line naming the fix)."""


def write_registration(path: Path, document: bytes) -> None:
    """Write a registration file atomically, mode 0644 (the proxy watches the directory), creating the
    directory if missing; raises RegistrationError."""
    if not is_config_name(path.name):
        raise RegistrationError(f"--register {path}: the proxy reads only files named NAME.json (not hidden); "
                                f"name it e.g. {path.parent / 'my-plugin.json'}")
    try:
        prepare_registration_dir(path.parent)
        _write_atomically(path, document)
    except OSError as error:
        raise RegistrationError(
            f"cannot write the registration --register {path}: {error.strerror or error}; pass --register FILE in "
            f"the directory the proxy watches (its --runtime-hook-config-dir, {DEFAULT_HOOK_CONFIG_DIR} by default), "
            "as a user who may write there") from None


def prepare_registration_dir(directory: Path) -> None:
    """Create `directory` and its missing parents 0755 (not the umask's mode: the proxy ignores files in a
    directory writable by group or others); raises RegistrationError for an existing such directory."""
    missing = []
    while not directory.exists() and directory != directory.parent:
        missing.append(directory)
        directory = directory.parent
    for created in reversed(missing):
        created.mkdir(mode=REGISTRATION_DIR_MODE, exist_ok=True)
        os.chmod(created, REGISTRATION_DIR_MODE)
    directory = missing[0] if missing else directory
    mode = directory.stat().st_mode
    if mode & _GROUP_OR_OTHER_WRITE:
        raise RegistrationError(
            f"--register: directory {directory} is writable by group or others (mode {mode & 0o7777:04o}): the "
            f"proxy ignores every file in it; chmod go-w {directory}, or register elsewhere")


def _write_atomically(path: Path, document: bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp")  # not *.json: the proxy never reads it half-written
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, REGISTRATION_MODE), "wb") as file:
        file.write(document + b"\n")
    os.chmod(temporary, REGISTRATION_MODE)  # whatever the umask
    os.replace(temporary, path)
