"""The package's layers: no import runs back up, transitively, and no two packages import each other.

From the bottom:
  root        the package's __init__ (its version; every import of a submodule runs it), importing nothing
  generated   runtimeproxy.pb (protoc's modules)
  shared      small modules every layer may use: endpoints, options, listener, trust, logformat, allocator,
              klogflags, lifecycle, activation, greeting, relay, usage; they may use each other, without a cycle
  core        runtimeproxy.hooks: the hook core, which knows no frontend
  seam        runtimeproxy.report (what a frontend tells the operator pieces) and call_tally (its counters)
  kits        runtimeproxy.plugin (writing a hook plugin), runtimeproxy.nri (NRI's protocol); peers
  frontends   runtimeproxy.cri, runtimeproxy.docker and runtimeproxy.admin; peers: admin reads a frontend only
              through runtimeproxy.report, and a frontend knows nothing of admin
  process     runtimeproxy.app (assembles the process), runtimeproxy.cli, runtimeproxy.__main__

A unit is a subpackage (runtimeproxy.cri) or a top-level module (runtimeproxy.options). The graph is every
module's imports read with ast (function-level imports too), plus the package __init__ modules an import
runs. rplab is tooling, not part of the runtime, and is left out (nothing else may import it); its own modules
may import each other, but without a cycle (a circle of tooling modules is one concept split in two).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import runtimeproxy

PACKAGE_DIR = Path(runtimeproxy.__file__).parent
TOOLING = "rplab"
TOOLING_DIR = PACKAGE_DIR.parent / TOOLING

LAYERS: tuple[tuple[str, frozenset[str], bool], ...] = (
    # (layer, its units, whether its units may import each other)
    ("root", frozenset({"runtimeproxy"}), False),
    ("generated", frozenset({"runtimeproxy.pb"}), False),
    ("shared", frozenset({
        "runtimeproxy.endpoints", "runtimeproxy.options", "runtimeproxy.listener",
        "runtimeproxy.trust", "runtimeproxy.logformat", "runtimeproxy.allocator", "runtimeproxy.klogflags",
        "runtimeproxy.lifecycle", "runtimeproxy.gotext", "runtimeproxy.activation", "runtimeproxy.greeting",
        "runtimeproxy.relay", "runtimeproxy.usage",
    }), True),
    ("core", frozenset({"runtimeproxy.hooks"}), False),
    ("seam", frozenset({"runtimeproxy.report", "runtimeproxy.call_tally"}), True),
    ("kits", frozenset({"runtimeproxy.plugin", "runtimeproxy.nri"}), False),
    ("frontends", frozenset({"runtimeproxy.cri", "runtimeproxy.docker", "runtimeproxy.admin"}), False),
    ("process", frozenset({"runtimeproxy.app", "runtimeproxy.cli", "runtimeproxy.__main__"}), True),
)
LAYER_OF = {unit: index for index, (_, units, _) in enumerate(LAYERS) for unit in units}
# Besides the layers: what the core must not reach even through a library (transport of a frontend).
CORE_FORBIDDEN = ("h11", "runtimeproxy.pb.cri")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    modules = {module_name(path): path for path in PACKAGE_DIR.rglob("*.py")}
    return {name: path for name, path in modules.items() if not _is_tooling(name)}


def _is_tooling(name: str) -> bool:
    return name == TOOLING or name.startswith(TOOLING + ".")


def imported_names(path: Path, name: str) -> Iterator[str]:
    """Every module name an import statement of the file names (`from a import b` yields a and a.b)."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    """Module -> the runtimeproxy modules it runs when imported (directly), parents' __init__ included."""
    modules = all_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for imported in imported_names(path, name):
            if not imported.startswith("runtimeproxy"):
                continue
            if _is_tooling(imported):
                edges.add(imported)  # reported by the test below; not followed
                continue
            parts = imported.split(".")
            edges.update(".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in modules)
        parents = name.split(".")
        edges.update(".".join(parents[:i]) for i in range(1, len(parents)))
        edges.discard(name)
        graph[name] = edges
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    stack = [start]
    while stack:
        for nxt in graph.get(stack.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    seen.discard(start)
    return seen


def unit_of(module: str) -> str:
    """runtimeproxy.cri.server -> runtimeproxy.cri; runtimeproxy.options -> itself."""
    return ".".join(module.split(".")[:2])


GRAPH = import_graph()


def test_every_module_has_a_layer() -> None:
    unplaced = sorted({unit_of(module) for module in GRAPH} - LAYER_OF.keys())
    assert unplaced == [], f"place these in LAYERS (tests/test_layout.py): {unplaced}"


def test_nothing_in_the_runtime_imports_the_tooling() -> None:
    users = sorted(module for module, edges in GRAPH.items() if any(_is_tooling(edge) for edge in edges))
    assert users == []


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_no_import_runs_back_up_or_sideways(module: str) -> None:
    unit = unit_of(module)
    layer = LAYER_OF[unit]
    _, _, peers_allowed = LAYERS[layer]
    wrong = sorted(
        other for other in reachable(GRAPH, module)
        if unit_of(other) != unit and not _is_tooling(other)
        and (LAYER_OF[unit_of(other)] > layer or (LAYER_OF[unit_of(other)] == layer and not peers_allowed))
    )
    assert wrong == [], f"{module} ({LAYERS[layer][0]}) reaches {wrong}"


def test_no_two_units_import_each_other() -> None:
    units: dict[str, set[str]] = {}
    for module, edges in GRAPH.items():
        units.setdefault(unit_of(module), set()).update(unit_of(edge) for edge in edges if not _is_tooling(edge))
    cycles = sorted(
        (unit, other) for unit, edges in units.items() for other in edges
        if other != unit and unit in reachable(units, other)
    )
    assert cycles == [], f"units in a cycle: {cycles}"


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if unit_of(m) == "runtimeproxy.hooks"))
def test_the_core_knows_no_transport_of_a_frontend(module: str) -> None:
    direct = set(imported_names(all_modules()[module], module))
    wrong = sorted(name for name in direct | reachable(GRAPH, module) if name.startswith(CORE_FORBIDDEN))
    assert wrong == [], f"{module} reaches {wrong}"


def tooling_graph() -> dict[str, set[str]]:
    """rplab module -> the rplab modules it imports (function-level imports too), the package itself left out."""
    modules = {module_name(path): path for path in TOOLING_DIR.glob("*.py")}
    return {name: {imported for imported in imported_names(path, name) if imported in modules} - {name, TOOLING}
            for name, path in modules.items()}


def test_no_cycle_among_the_tooling_modules() -> None:
    graph = tooling_graph()
    cycles = sorted((module, other) for module, edges in graph.items() for other in edges
                    if module in reachable(graph, other))
    assert cycles == [], f"rplab modules in a cycle (move what both need into a module of its own): {cycles}"


def test_no_two_test_modules_share_a_basename() -> None:
    """tests/ and its folders are plain directories on sys.path (rootdir-relative imports): two test modules of one
    basename make the whole suite's collection fail, or one silently shadow the other."""
    tests_dir = Path(__file__).resolve().parent
    seen: dict[str, list[str]] = {}
    for path in sorted(tests_dir.rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(tests_dir)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_the_tests_shared_helpers_live_in_one_package() -> None:
    """A kit is imported as tests.kits.NAME from anywhere; none hides in a test folder behind a sys.path insert."""
    tests = PACKAGE_DIR.parent / "tests"
    strays = sorted(str(path.relative_to(tests)) for path in tests.rglob("*kit.py") if path.parent.name != "wire")
    assert not strays, f"move these into tests/kits/ (imported as tests.kits.NAME): {strays}"
    inserts = sorted(str(path.relative_to(tests)) for path in tests.rglob("test_*.py")
                     if re.search(r"^\s*sys\.path\.insert\(", path.read_text(), re.M))
    assert not inserts, f"import kits as tests.kits.NAME instead of inserting into sys.path: {inserts}"
