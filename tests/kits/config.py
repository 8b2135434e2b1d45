"""Registration files for the registry and config tests."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

LOGGER = "runtimeproxy.hooks"  # registration logs from hooks.registry, hooks.config and hooks.plugin
KOORDLET = (
    b'{"remote-endpoint": "/var/run/koordlet/koordlet.sock", "failure-policy": "Ignore", '
    b'"runtime-hooks": ["PreRunPodSandbox"]}'
)

KNOWN_HOOKS = (
    "PreRunPodSandbox, PreCreateContainer, PreStartContainer, PostStartContainer, "
    "PreUpdateContainerResources, PostStopContainer, PostStopPodSandbox"
)


def config_bytes(**fields: Any) -> bytes:
    """A config with a valid endpoint and hook; a field given as ... is left out."""
    document: dict[str, Any] = {"remote-endpoint": "/run/plugin.sock", "runtime-hooks": ["PreRunPodSandbox"]}
    document.update({key.replace("_", "-"): value for key, value in fields.items()})
    return orjson.dumps({key: value for key, value in document.items() if value is not ...})


def messages(caplog: pytest.LogCaptureFixture, level: int | None = None) -> list[str]:
    return [
        record.getMessage() for record in caplog.records
        if record.name.startswith(LOGGER + ".") and (level is None or record.levelno == level)
    ]
