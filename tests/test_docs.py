"""The docs site builds strictly (a broken link, anchor or page fails), the README stays a short front page whose
blocks are the docs' own, no page names an internal issue number, and the figures the pages give of the code are
the code's."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from markdown.extensions.toc import slugify

from tests.kits.docs import DOCS_DIR, README, REPO_ROOT, block_starting, blocks, doc_block, doc_command, doc_page
from tests.kits.packages import _NOT_SOURCE, NODE_INSTALL_ID, NODE_INSTALL_PAGE
from runtimeproxy.cri import backend

README_MAX_LINES = 200
FIRST_PLUGIN_HEADER = "# my_plugin.py:"


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    """`mkdocs build --strict` as the README and the developers' guide say, with the virtualenv's mkdocs, in a clean
    copy of the checkout (it writes site/ there)."""
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO_ROOT, checkout, ignore=_NOT_SOURCE)
    environment = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    for command in {doc_command(page, "mkdocs build --strict") for page in ("README.md", "docs/development.md")}:
        shutil.rmtree(checkout / "site", ignore_errors=True)
        done = subprocess.run(["sh", "-ec", command], cwd=checkout, capture_output=True, text=True, timeout=300,
                              env=environment)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (checkout / "site" / "plugins" / "index.html").is_file()


def test_the_readme_is_a_short_front_page() -> None:
    assert len(README.read_text().splitlines()) <= README_MAX_LINES
    assert blocks("README.md")[0].text.splitlines() == [  # the two set-up commands come first
        "bash scripts/lab.sh     # local lab: real containerd + the proxy + an example plugin, a pod lifecycle through it",
        "bash scripts/test.sh    # the test suite, end to end against a real containerd (and newer ones: Runtime "
        "versions)"]


def test_the_readmes_quick_starts_are_the_blocks_the_tests_run_from_the_docs() -> None:
    readme = README.read_text()
    assert doc_block("README.md", NODE_INSTALL_ID) == doc_block(NODE_INSTALL_PAGE, NODE_INSTALL_ID)
    assert block_starting(readme, FIRST_PLUGIN_HEADER, "python") == block_starting(
        doc_page("plugins.md"), FIRST_PLUGIN_HEADER, "python")


def heading_anchors(text: str) -> set[str]:
    """The anchors mkdocs gives a page's headings (fenced blocks' comment lines are no headings)."""
    outside_blocks = re.sub(r"```.*?```", "", text, flags=re.S)
    return {slugify(re.sub(r"[`*]", "", match), "-")
            for match in re.findall(r"^#+ (.+)$", outside_blocks, flags=re.M)}


def test_the_readmes_links_into_the_docs_name_pages_and_anchors_that_exist() -> None:
    links = re.findall(r"\]\((docs/[^)#]+)(?:#([^)]+))?\)", README.read_text())
    assert links
    for page, anchor in links:
        path = REPO_ROOT / page
        assert path.is_file(), page
        if anchor:
            assert anchor in heading_anchors(path.read_text()), f"{page}#{anchor}"


def test_no_page_names_an_internal_issue_number() -> None:
    for path in [README, *sorted(DOCS_DIR.rglob("*.md"))]:
        text = path.read_text()
        assert not re.search(r"(?i)\bissues?\b", text), path
        assert not re.search(r"#\d", text), path


def seconds(value: float) -> str:
    return f"{value:g} s"


def test_the_backend_probe_figures_are_the_codes() -> None:
    """The liveness probe's interval, deadline and the time to find a frozen backend, as cri.backend sets them."""
    interval, timeout = seconds(backend.PROBE_INTERVAL_SECONDS), seconds(backend.PROBE_TIMEOUT_SECONDS)
    found_within = seconds(backend.PROBE_INTERVAL_SECONDS
                           + backend.PROBE_FAILURES_FOR_UNRESPONSIVE * backend.PROBE_TIMEOUT_SECONDS)
    assert backend.PROBE_FAILURES_FOR_UNRESPONSIVE == 2  # "two misses" below
    failure_modes = doc_page("failure-modes.md")
    assert f"probe every {interval} ({timeout} deadline; " in failure_modes
    assert "after two misses in a row" in failure_modes and f"`NOT_SERVING` within ~{found_within}" in failure_modes
    index = doc_page("index.md")
    assert f"a `Version` call every {interval}," in index and f"`NOT_SERVING` within ~{found_within}" in index


# A module of the checkout's tooling run with a Python: the system's has none of its imports (grpc, ...).
TOOLING_COMMAND = re.compile(r"(\S*)python3? -m ((?:bench|rplab)(?:\.\w+)*)")


def test_the_tooling_commands_name_the_checkouts_python_and_run() -> None:
    """`python3 -m bench` fails with the system's Python (no grpc): the pages say `.venv/bin/python -m ...`,
    run from the checkout, and each module they name answers --help so."""
    named: set[str] = set()
    for path in [README, *sorted(DOCS_DIR.rglob("*.md"))]:
        for prefix, module in TOOLING_COMMAND.findall(path.read_text()):
            assert prefix.endswith(".venv/bin/"), f"{path.name}: {prefix}python -m {module}"
            named.add(module)
    assert {"bench", "rplab"} <= named
    for module in sorted(named):
        done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=60, env={**os.environ, "PYTHONPATH": ""})
        assert done.returncode == 0, f"{module}: {done.stderr[-2000:]}"
