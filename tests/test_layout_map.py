"""The two maps of the package — each package's docstring and docs/development.md's "Code layout" — name every
module of the tree, and only modules that exist.

A map names a module in backticks (`server`), dotted under its package (plugin.answers), or in the first column
of a docstring's two-column list (`  merge, validate    what they do`). A new module fails here until both maps
say where it lives; a removed one, until both forget it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import runtimeproxy

PACKAGE_DIR = Path(runtimeproxy.__file__).parent
DEVELOPMENT = PACKAGE_DIR.parent / "docs" / "development.md"
GENERATED = "pb"  # protoc's output: named by the map as a whole, never module by module
NOT_MODULES = frozenset({"__init__", "__main__"})

_BACKTICKED = re.compile(r"`([A-Za-z_][\w.]*)`")
_COLUMN_LINE = re.compile(r"^ {2}([a-z_]\w*(?:, [a-z_]\w*)*)(?: {2,}|,?$)")


def packages() -> list[Path]:
    return sorted(
        path.parent for path in PACKAGE_DIR.rglob("__init__.py") if GENERATED not in path.relative_to(PACKAGE_DIR).parts
    )


def modules_of(package: Path) -> set[str]:
    """The package's modules and subpackages, by their last name."""
    names = {path.stem for path in package.glob("*.py") if path.stem not in NOT_MODULES}
    names |= {path.name for path in package.iterdir() if (path / "__init__.py").exists()}
    return names


def named_in(text: str, package: Path) -> set[str]:
    """Every name a map's text gives a module of `package`, whether it exists or not."""
    prefix = package.name + "."
    names: set[str] = set()
    for word in _BACKTICKED.findall(text):
        names.add(word.removeprefix(prefix).split(".")[0])
    names |= {word.removeprefix(prefix) for word in re.findall(rf"\b{re.escape(prefix)}(\w+)", text)}
    return names | column_names(text)


def docstring_of(package: Path) -> str:
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text()), clean=False) or ""


def layout_bullet(package: Path) -> str:
    """development.md's bullet for the package: from its "- `runtimeproxy/…/`" line to the next bullet."""
    relative = package.relative_to(PACKAGE_DIR.parent).as_posix() + "/"
    lines = DEVELOPMENT.read_text().split("## Code layout", 1)[1].splitlines()
    starts = [i for i, line in enumerate(lines) if line.lstrip().startswith(f"- `{relative}`")]
    assert starts, f"docs/development.md's Code layout has no bullet for {relative}"
    start = starts[0]
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].lstrip().startswith("- ") and len(lines[i]) - len(lines[i].lstrip()) <= indent),
               len(lines))
    return "\n".join(lines[start:end])


def unmapped(package: Path, text: str) -> set[str]:
    return modules_of(package) - named_in(text, package) - ({GENERATED} if package == PACKAGE_DIR else set())


@pytest.mark.parametrize("package", packages(), ids=lambda p: p.relative_to(PACKAGE_DIR.parent).as_posix())
def test_the_package_docstring_names_every_module(package: Path) -> None:
    missing = unmapped(package, docstring_of(package))
    assert not missing, f"{package / '__init__.py'}'s docstring does not say what these are: {sorted(missing)}"


@pytest.mark.parametrize("package", packages(), ids=lambda p: p.relative_to(PACKAGE_DIR.parent).as_posix())
def test_the_layout_map_names_every_module(package: Path) -> None:
    subpackages = {path.name for path in package.iterdir() if (path / "__init__.py").exists()}
    missing = unmapped(package, layout_bullet(package)) - subpackages  # each has a bullet of its own
    assert not missing, f"docs/development.md's Code layout, bullet of {package.name}, lacks: {sorted(missing)}"


def column_names(text: str) -> set[str]:
    """The names in the first column of a docstring's two-column list: module names and nothing else."""
    return {name for line in text.splitlines() if (match := _COLUMN_LINE.match(line)) for name in match.group(1).split(", ")}


@pytest.mark.parametrize("package", packages(), ids=lambda p: p.relative_to(PACKAGE_DIR.parent).as_posix())
def test_the_package_docstring_lists_no_module_that_is_gone(package: Path) -> None:
    gone = column_names(docstring_of(package)) - modules_of(package)
    assert not gone, f"{package / '__init__.py'}'s docstring lists modules that are gone: {sorted(gone)}"


def test_the_maps_read_all_three_forms() -> None:
    package = PACKAGE_DIR / "plugin"
    text = "`service` and plugin.answers\n  merge, validate    folding\n  chain\n"
    assert {"service", "answers", "merge", "validate", "chain"} <= named_in(text, package)
