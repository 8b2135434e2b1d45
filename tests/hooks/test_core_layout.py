"""The hook core (runtimeproxy/hooks) knows no frontend: nothing of the CRI server, Docker's HTTP or admin."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import runtimeproxy.hooks

CORE = Path(runtimeproxy.hooks.__file__).parent
FRONTEND_MODULES = ("runtimeproxy.cri", "runtimeproxy.docker", "runtimeproxy.admin", "h11", "runtimeproxy.pb.cri")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("module", sorted(CORE.glob("*.py")), ids=lambda path: path.name)
def test_a_core_module_imports_no_frontend(module: Path) -> None:
    frontend = [name for name in imported_modules(module) if name.startswith(FRONTEND_MODULES)]
    assert frontend == [], f"{module.name} imports {frontend}"
