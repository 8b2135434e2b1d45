"""The package as a user installs it: the wheel holds every module of the source tree and the protos and no
tooling (the lab rplab/, bench/, tests/ stay in the checkout), every module of it imports outside the checkout,
and the node install of docs/install.md works as written with Debian 12's own python3, from outside the checkout.

(The installed commands carrying a real pod lifecycle: tests/e2e/test_installed.py.)
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from runtimeproxy import __version__

from tests.kits.machine import skip_or_fail
from tests.kits.packages import (
    PACKAGE_WORKDIR, REPO_ROOT, built_wheel, install_as_documented, installed_wheel, node_install_lines, wheel_names,
)

PACKAGE_DIR = REPO_ROOT / "runtimeproxy"
PROTOS_DIR = REPO_ROOT / "protos"
DEBIAN_PYTHON = Path("/usr/bin/python3")
# Top-level packages of the checkout that are tooling, never runtime: not in the wheel, never imported by it.
TOOLING = ("rplab", "bench", "tests")


def source_modules() -> set[str]:
    """Every .py (and typing file) of the runtime package, as wheel member names."""
    files = [path for pattern in ("*.py", "*.pyi", "py.typed") for path in PACKAGE_DIR.rglob(pattern)]
    return {str(path.relative_to(REPO_ROOT)) for path in files if "__pycache__" not in path.parts}


def test_the_wheel_holds_every_module_of_the_source_tree() -> None:
    in_wheel = wheel_names(built_wheel())
    missing = sorted(source_modules() - in_wheel)
    assert not missing, f"modules of the source tree missing from the wheel (a package without __init__.py?): {missing}"


def test_every_source_directory_with_modules_is_a_package() -> None:
    directories = {path.parent for path in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in path.parts}
    assert sorted(str(d) for d in directories if not (d / "__init__.py").is_file()) == []


def test_the_wheel_carries_the_protos_and_nothing_but_the_package() -> None:
    in_wheel = wheel_names(built_wheel())
    protos = {f"runtimeproxy/protos/{path.relative_to(PROTOS_DIR)}" for path in PROTOS_DIR.rglob("*.proto")}
    assert "runtimeproxy/protos/hooks/runtime/v1alpha1/api.proto" in protos
    assert protos <= in_wheel
    outside = sorted(name for name in in_wheel
                     if not name.startswith(("runtimeproxy/", f"runtimeproxy-{__version__}.dist-info/")))
    assert outside == []


def test_the_wheel_holds_no_tooling() -> None:
    in_wheel = wheel_names(built_wheel())
    tooling = sorted(name for name in in_wheel
                     if name.split("/")[0] in TOOLING or name.startswith("rplab/"))
    assert tooling == []
    assert (REPO_ROOT / "rplab" / "__main__.py").is_file() and (REPO_ROOT / "bench" / "__main__.py").is_file()


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_the_runtime_package_imports_no_tooling() -> None:
    found = {f"{path.relative_to(REPO_ROOT)}: {name}"
             for path in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in path.parts
             for name in imported_modules(path) if name.split(".")[0] in TOOLING}
    assert sorted(found) == []


def test_every_module_of_the_wheel_imports_outside_the_checkout() -> None:
    """The wheel holds everything the runtime needs: each of its modules imports in the wheel's virtualenv,
    from /, where nothing of the checkout (the tooling) can be found."""
    script = ("import importlib, pkgutil, sys, runtimeproxy\n"
              "names = [m.name for m in pkgutil.walk_packages(runtimeproxy.__path__, 'runtimeproxy.')\n"
              "         if not m.name.endswith('__main__')]\n"
              "for name in names: importlib.import_module(name)\n"
              f"assert not [m for m in sys.modules if m.split('.')[0] in {TOOLING!r}]\n"
              "print(len(names), runtimeproxy.__file__)\n")
    done = subprocess.run([str(installed_wheel() / "python"), "-c", script], cwd="/", capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    count, where = done.stdout.split()
    modules = [path for path in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in path.parts
               and path.name != "__main__.py"]
    assert int(count) + 1 == len(modules) and where.startswith(str(PACKAGE_WORKDIR))  # + runtimeproxy itself


def test_the_node_install_block_is_what_this_test_runs() -> None:
    lines = node_install_lines()
    assert lines[0] == "python3 -m venv /opt/koord-runtime-proxy"
    assert "/opt/koord-runtime-proxy/bin/pip install ." in lines
    unit = (REPO_ROOT / "deploy" / "koord-runtime-proxy.service").read_text()
    assert "ExecStart=/opt/koord-runtime-proxy/bin/koord-runtime-proxy " in unit


def test_the_documented_node_install_works_as_written_with_debians_python() -> None:
    if not DEBIAN_PYTHON.is_file():
        skip_or_fail(f"{DEBIAN_PYTHON} (Debian's python3) is not installed")
    if subprocess.run([str(DEBIAN_PYTHON), "-c", "import ensurepip, venv"], capture_output=True).returncode != 0:
        skip_or_fail("Debian's python3-venv is not installed; run scripts/setup.sh")
    prefix = PACKAGE_WORKDIR / "opt-koord-runtime-proxy"
    shutil.rmtree(prefix, ignore_errors=True)
    outputs = dict(install_as_documented(prefix))
    assert outputs["/opt/koord-runtime-proxy/bin/koord-runtime-proxy --version"].strip().endswith(__version__)
    assert outputs["/opt/koord-runtime-proxy/bin/runtimeproxyctl --version"] == f"runtimeproxyctl {__version__}\n"
    # The commands run the virtualenv's interpreter (Debian's python3), and import the installed package.
    assert (prefix / "bin" / "koord-runtime-proxy").read_text().startswith(f"#!{prefix}/bin/python")
    where = subprocess.run([str(prefix / "bin" / "python"), "-c", "import runtimeproxy.cri, sys; "
                            "print(runtimeproxy.cri.__file__); print(sys.base_prefix)"],
                           cwd="/", capture_output=True, text=True, check=True).stdout.split()
    assert where[0].startswith(f"{prefix}/lib/python3") and where[1] == "/usr"
    assert list(prefix.glob("lib/python3*/site-packages/runtimeproxy/protos/hooks/runtime/v1alpha1/api.proto"))


@pytest.mark.parametrize("command", ["koord-runtime-proxy", "runtimeproxyctl"])
def test_installed_commands_answer_help_outside_the_checkout(command: str) -> None:
    done = subprocess.run([str(installed_wheel() / command), "--help"], cwd="/", capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_the_build_system_is_declared_in_pyproject() -> None:
    """PEP 517: pip builds through setuptools' backend (setup.cfg and setup.py stay), not the legacy setup.py path."""
    build = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["build-system"]
    assert build["build-backend"] == "setuptools.build_meta"
    assert any(requirement.startswith("setuptools") for requirement in build["requires"])
