"""rplab.nodepackages without building a package: what it stages and what its scripts say."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rplab.nodepackages import (MAINTAINER_SCRIPTS, SOCKET_UNITS, UNIT, UNIT_DIR, rpm_spec, stage)


def test_the_service_and_its_socket_units_are_staged(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    stage(bundle, tmp_path / "pkg")
    for unit in (UNIT, *SOCKET_UNITS):
        staged = tmp_path / "pkg" / UNIT_DIR.lstrip("/") / unit.name
        assert staged.read_text() == unit.read_text()
        assert f"{UNIT_DIR}/{unit.name}\n" in rpm_spec("1.0", tmp_path / "pkg")


@pytest.mark.parametrize("name", sorted(MAINTAINER_SCRIPTS))
def test_maintainer_scripts_parse_and_handle_the_sockets_with_the_service(name: str) -> None:
    script = MAINTAINER_SCRIPTS[name]
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    if name in ("postinst", "prerm"):
        assert all(unit.name in script for unit in SOCKET_UNITS)
