"""Every shell block and inline command line of README.md and docs/*.md is run by a test as written, or says why
not: a block carries `<!-- run: ID -->` and a test of RUN_BY loads it with docskit.doc_block(page, ID), or it
carries `<!-- not-run: REASON -->`; an inline command line is claimed in RUN_BY (loaded with docskit.doc_command)
or has the not-run marker just before it. The claims are checked in the claiming test's source (its own code, the
helpers and fixtures it calls): a claim cannot name a test that does not read the block."""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import subprocess
import sys
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.kits import docs as docskit
from tests.kits.docs import (REPO_ROOT, block_starting, blocks, doc_block, doc_command, doc_page, doc_pages,
                     inline_commands)
from tests.kits.namespace import private_namespace, private_setup
from tests.kits.packages import built_wheel, make_virtualenv

TESTS_DIR = REPO_ROOT / "tests"
SAME_AS = "="  # a RUN_BY value "=PAGE": the block is the same text as PAGE's block of that ID, which a test runs
DEBIAN_ROOTS = "tests/e2e/test_debian_roots.py::test_the_documented_node_install_runs_as_written_in_a_fresh_debian_root"
NODE_TEST = "tests/e2e/test_documented_node.py"
STATUS = "runtimeproxyctl status"

# (page, block ID or inline command line) -> the test that runs it as written ("tests/FILE.py::TEST").
RUN_BY: dict[tuple[str, str], str] = {
    ("docs/install.md", "node-install"): DEBIAN_ROOTS,
    ("README.md", "node-install"): SAME_AS + "docs/install.md",
    ("docs/install.md", "by-hand"): f"{NODE_TEST}::test_the_proxy_run_by_hand_serves_the_kubelets_socket",
    ("docs/install.md", "private-proxy"): f"{NODE_TEST}::test_a_private_proxy_and_the_admin_endpoint_variable",
    ("docs/operating.md", "admin-endpoint"): f"{NODE_TEST}::test_a_private_proxy_and_the_admin_endpoint_variable",
    ("docs/operating.md", "shadow"): f"{NODE_TEST}::test_shadow_stage_and_promote_a_plugin",
    ("docs/operating.md", "runtimeproxyctl shadow koordlet.v2 --stage"):
        f"{NODE_TEST}::test_shadow_stage_and_promote_a_plugin",
    **{("docs/operating.md", command): f"{NODE_TEST}::test_shadow_stage_and_promote_a_plugin"
       for command in ("runtimeproxyctl unshadow koordlet.v2", 'runtimeproxyctl disable koordlet --reason "replaced by v2"',
                       "runtimeproxyctl shadow koordlet.v2", "runtimeproxyctl shadow nri:20-name --stage")},
    **{(page, STATUS): f"{NODE_TEST}::test_the_proxy_run_by_hand_serves_the_kubelets_socket"
       for page in ("README.md", "docs/failure-modes.md", "docs/install.md", "docs/nri.md", "docs/operating.md",
                    "docs/plugins.md")},
    **{(page, "runtimeproxyctl trace POD"): f"{NODE_TEST}::test_trace_shows_why_a_pod_got_what_it_got"
       for page in ("README.md", "docs/index.md", "docs/nri.md", "docs/operating.md")},
    ("README.md", "first-plugin"): "tests/test_doc_blocks.py::test_the_first_plugin_registers_itself_and_tries_as_written",
    ("docs/plugins.md", "register"): "tests/test_doc_blocks.py::test_the_first_plugin_registers_itself_and_tries_as_written",
    ("docs/install.md", "lab-crictl"):
        "tests/lab/test_lab_command.py::test_a_kept_lab_prints_commands_that_work_as_printed_and_sigterm_removes_everything",
    ("docs/plugins.md", "protoc"): "tests/test_doc_blocks.py::test_the_stubs_compile_from_the_installed_protos",
    ("docs/plugins.md", "try-plugin"): "tests/test_doc_blocks.py::test_try_plugin_on_the_first_plugin",
    ("docs/plugins.md", "try-plugin-request"): "tests/test_doc_blocks.py::test_try_plugin_on_the_first_plugin",
    ("docs/plugins.md", ".venv/bin/python -m rplab.example_plugin --socket PATH"):
        "tests/test_doc_blocks.py::test_the_example_plugin_serves_on_the_socket_given",
    ("README.md", ".venv/bin/mkdocs serve"): "tests/test_doc_blocks.py::test_mkdocs_serve_serves_the_site",
    ("docs/development.md", ".venv/bin/mkdocs serve"): "tests/test_doc_blocks.py::test_mkdocs_serve_serves_the_site",
    ("README.md", "mkdocs build --strict"): "tests/test_docs.py::test_the_docs_site_builds_strictly",
    ("docs/runtimes.md", ".venv/bin/python -m rplab.runtimes list"): "tests/test_doc_blocks.py::test_the_runtime_table_lists_every_runtime",
    ("docs/development.md", "mkdocs build --strict"): "tests/test_docs.py::test_the_docs_site_builds_strictly",
}

DOC_LOADERS = ("doc_block", "doc_command")


# -- the claims, read from the claiming test's source ------------------------------------------------------------


@functools.cache
def _module(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _module_path(name: str, near: Path) -> Path | None:
    """A tests helper module imported by name (tests/ and tests/e2e/ are on sys.path) or by its dotted name from
    the repository's root (tests.kits.docs), or None."""
    if "." in name:
        dotted = REPO_ROOT.joinpath(*name.split(".")).with_suffix(".py")
        return dotted if dotted.is_file() else None
    for directory in (near.parent, TESTS_DIR, TESTS_DIR / "e2e"):
        if (directory / f"{name}.py").is_file():
            return directory / f"{name}.py"
    return None


def _definition(path: Path, name: str) -> tuple[Path, ast.AST] | None:
    """Where a name used in module path is defined: a top-level function or assignment there, or in the tests
    helper module it is imported from, or (a fixture) in a conftest.py beside it."""
    for node in _module(path).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return path, node
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return path, node.value
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                source = _module_path(node.module, path)
                if (alias.asname or alias.name) == name and source is not None:
                    return _definition(source, alias.name)
    conftest = path.parent / "conftest.py"
    return _definition(conftest, name) if conftest != path and conftest.is_file() else None


def _strings(path: Path, node: ast.AST, loops: Mapping[str, ast.AST]) -> set[str]:
    """The string values an argument can have: literals, module constants, tuples of them, f-strings aside."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_strings(path, element, loops) for element in node.elts))
    if isinstance(node, ast.Name):
        if node.id in loops:
            return _strings(path, loops[node.id], {})
        found = _definition(path, node.id)
        if found and not isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
            return _strings(found[0], found[1], {})
    return set()


def _loads(path: Path, function: ast.AST, seen: set[tuple[Path, str]]) -> set[tuple[str, str]]:
    """The (page, ID) pairs a function loads through docskit, itself or through the functions and fixtures it
    uses (of its module, the tests helper modules, conftest.py)."""
    loops = {node.target.id: node.iter for node in ast.walk(function)
             if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name)}
    loaded: set[tuple[str, str]] = set()
    names = {node.id for node in ast.walk(function) if isinstance(node, ast.Name)}
    if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        names |= {argument.arg for argument in function.args.args}  # fixtures
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in DOC_LOADERS \
                and len(node.args) == 2:
            pages, ids = (_strings(path, argument, loops) for argument in node.args)
            loaded |= {(_page_name(page), block_id) for page in pages for block_id in ids}
    for name in names - set(DOC_LOADERS):
        found = _definition(path, name)
        if found and isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef)) and (found[0], name) not in seen:
            seen.add((found[0], name))
            loaded |= _loads(found[0], found[1], seen)
    return loaded


def _page_name(page: str) -> str:
    return page if page == "README.md" or page.startswith("docs/") else f"docs/{page}"


def loaded_by(test: str) -> set[tuple[str, str]]:
    """What the test "tests/FILE.py::TEST" loads through docskit."""
    file, name = test.split("::")
    found = _definition(REPO_ROOT / file, name)
    assert found is not None, f"RUN_BY names {test}, which does not exist"
    return _loads(found[0], found[1], set())


# -- the inventory ---------------------------------------------------------------------------------------------

FIX = ("put `<!-- run: ID -->` on the line before it and have a test run doc_block(PAGE, ID) (claimed in "
       "tests/test_doc_blocks.py's RUN_BY), or `<!-- not-run: REASON -->` saying why it cannot run here")


def _missing_test_paths(where: str, reason: str) -> list[str]:
    return [f"{where}: the reason names {path}, which does not exist" for path in re.findall(r"tests/[\w/.]*\w", reason)
            if not (REPO_ROOT / path).exists()]


def unaccounted() -> list[str]:
    problems = []
    for page in doc_pages():
        for block in blocks(page):
            if not block.is_shell:
                continue
            where = f"{page}:{block.line}"
            if block.run_id is None and block.not_run_reason is None:
                problems.append(f"{where}: a shell block neither run nor marked: {FIX}")
            elif block.not_run_reason == "":
                problems.append(f"{where}: `<!-- not-run: -->` without a reason: say why it cannot run here")
            problems += _missing_test_paths(where, block.not_run_reason or "")
            if block.run_id is not None and (page, block.run_id) not in RUN_BY:
                problems.append(f"{where}: `run: {block.run_id}` is claimed by no test: add it to RUN_BY")
        for command in inline_commands(page):
            if command.not_run_reason is None and (page, command.text) not in RUN_BY:
                problems.append(f"{page}:{command.line}: the command line `{command.text}` is neither run nor "
                                "marked: claim it in RUN_BY (a test running doc_command(PAGE, TEXT)), or put "
                                "`<!-- not-run: REASON -->` just before it")
            elif command.not_run_reason == "":
                problems.append(f"{page}:{command.line}: `<!-- not-run: -->` without a reason before "
                                f"`{command.text}`: say why it cannot run here")
            problems += _missing_test_paths(f"{page}:{command.line}", command.not_run_reason or "")
    return problems


def test_every_shell_block_and_command_line_of_the_docs_is_run_or_says_why_not() -> None:
    problems = unaccounted()
    assert not problems, "\n".join(problems)


def test_every_claim_names_a_test_that_loads_that_block() -> None:
    block_ids = {(page, block.run_id) for page in doc_pages() for block in blocks(page) if block.run_id}
    commands = {(page, command.text) for page in doc_pages() for command in inline_commands(page)}
    for (page, block_id), test in RUN_BY.items():
        assert (page, block_id) in block_ids | commands, f"RUN_BY: {page} has no `run: {block_id}` block and " \
                                                         f"no command line `{block_id}`"
        if test.startswith(SAME_AS):
            other = test.removeprefix(SAME_AS)
            assert doc_block(page, block_id) == doc_block(other, block_id), f"{page} {block_id} differs from {other}'s"
            assert not RUN_BY[(other, block_id)].startswith(SAME_AS)
        else:
            assert (page, block_id) in loaded_by(test), f"RUN_BY: {test} does not load {page} {block_id!r} " \
                                                        "through docskit.doc_block/doc_command"


def test_a_claim_by_a_test_that_does_not_read_the_block_is_refused() -> None:
    assert ("docs/install.md", "node-install") in loaded_by(DEBIAN_ROOTS)  # through packagekit's helper
    assert not loaded_by("tests/test_docs.py::test_no_page_names_an_internal_issue_number")


def test_a_block_neither_run_nor_marked_is_named_with_what_to_do(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "docs" / "new.md"
    page.parent.mkdir()
    page.write_text("Try it:\n\n```sh\nruntimeproxyctl status\n```\n\nor `runtimeproxyctl enable --all` and\n"
                    "<!-- not-run: needs a cluster --> `kubectl get pods -A`\n")
    monkeypatch.setattr(docskit, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(docskit, "DOCS_DIR", tmp_path / "docs")
    monkeypatch.setattr(docskit, "README", tmp_path / "README.md")
    (tmp_path / "README.md").write_text("# x\n")
    problems = unaccounted()
    assert [problem.split(":", 2)[:2] for problem in problems] == [["docs/new.md", "3"], ["docs/new.md", "7"]]
    assert all("\n" not in problem for problem in problems)


# -- the blocks that run without a runtime --------------------------------------------------------------------

FIRST_PLUGIN_HEADER = "# my_plugin.py:"


def _wait_for(path: Path, process: subprocess.Popen[str] | None = None, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process is None or process.poll() is None, f"exited {process.returncode} before making {path}"
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


def test_the_stubs_compile_from_the_installed_protos(tmp_path: Path) -> None:
    """plugins.md's protoc lines, with a python3 that imports the installed package and has grpcio-tools."""
    bin_dir = make_virtualenv(tmp_path / "venv")
    [site_packages] = (tmp_path / "venv").glob("lib/python3*/site-packages")
    with zipfile.ZipFile(built_wheel()) as wheel:  # installed, not editable: the protos are in the package
        wheel.extractall(site_packages)
    [own] = Path(sys.executable).parent.parent.glob("lib/python3*/site-packages")
    (site_packages / "test-dependencies.pth").write_text(f"{own}\n")  # grpcio, protobuf, grpcio-tools
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run(["sh", "-ec", doc_block("docs/plugins.md", "protoc")], cwd=out, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    assert {path.name for path in (out / "hooks" / "runtime" / "v1alpha1").iterdir()} >= {"api_pb2.py",
                                                                                          "api_pb2_grpc.py"}


def test_try_plugin_on_the_first_plugin(tmp_path: Path) -> None:
    """plugins.md's try-plugin lines against its first plugin serving on /run/my-plugin/plugin.sock, in a private
    /run; the example's printed output is what the command prints."""
    (tmp_path / "my_plugin.py").write_text(block_starting(doc_page("plugins.md"), FIRST_PLUGIN_HEADER, "python"))
    with private_namespace("mount -t tmpfs -o mode=0755 tmpfs /run") as namespace:
        plugin = namespace.start("python3 my_plugin.py --socket /run/my-plugin/plugin.sock", tmp_path,
                                 tmp_path / "plugin.log")
        assert namespace.run("for i in $(seq 300); do [ -S /run/my-plugin/plugin.sock ] && exit; sleep 0.1; done; "
                             "exit 1", tmp_path).returncode == 0, (tmp_path / "plugin.log").read_text()
        [command, *shown] = doc_block("docs/plugins.md", "try-plugin").splitlines()
        done = namespace.run(command.removeprefix("$ "), REPO_ROOT)
        assert (done.returncode, done.stdout.splitlines()) == (0, shown), done.stderr
        done = namespace.run(doc_block("docs/plugins.md", "try-plugin-request"), REPO_ROOT)
        assert done.returncode == 0 and done.stdout.startswith("PreCreateContainer: valid"), done.stdout + done.stderr
        assert namespace.stop(plugin) == 0


def test_the_first_plugin_registers_itself_and_tries_as_written(tmp_path: Path) -> None:
    """The README's first plugin, started as its block says (--register into /etc/runtime/hookserver.d, which does
    not exist yet), then tried; plugins.md's registration lines; in a private /run and /etc."""
    (tmp_path / "my_plugin.py").write_text(block_starting(doc_page("README.md"), FIRST_PLUGIN_HEADER, "python"))
    start, try_it = doc_block("README.md", "first-plugin").splitlines()
    serve, print_registration = [line.split("  #")[0].strip() for line in doc_block("docs/plugins.md", "register")
                                 .splitlines() if line.startswith("python3 ")]
    assert serve == start
    registration = Path("/etc/runtime/hookserver.d/my-plugin.json")
    private_run_and_etc = "\n".join(private_setup().splitlines()[:3])  # /run and /etc (the test's files are in /tmp)
    with private_namespace(private_run_and_etc) as namespace:
        assert namespace.run("rm -rf /etc/runtime", tmp_path).returncode == 0  # as on a node without the proxy
        plugin = namespace.start(start, tmp_path, tmp_path / "plugin.log")
        assert namespace.run(f"for i in $(seq 300); do [ -s {registration} ] && exit; sleep 0.1; done; exit 1",
                             tmp_path).returncode == 0, (tmp_path / "plugin.log").read_text()
        written = json.loads(namespace.run(f"cat {registration}", tmp_path).stdout)
        done = namespace.run(try_it, REPO_ROOT)
        assert done.returncode == 0 and done.stdout.startswith("PreCreateContainer: valid"), done.stdout + done.stderr
        printed = namespace.run(print_registration, tmp_path)
        assert printed.returncode == 0 and json.loads(printed.stdout) == written, printed.stderr
        assert namespace.stop(plugin) == 0, (tmp_path / "plugin.log").read_text()


def test_the_example_plugin_serves_on_the_socket_given(tmp_path: Path) -> None:
    socket = tmp_path / "example.sock"
    command = doc_command("docs/plugins.md", ".venv/bin/python -m rplab.example_plugin --socket PATH").replace("PATH",
                                                                                                     str(socket))
    plugin = subprocess.Popen(["sh", "-c", f"exec {command}"], cwd=REPO_ROOT, text=True, stderr=subprocess.PIPE,
                              env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    try:
        _wait_for(socket, plugin)
    finally:
        plugin.terminate()
        stderr = plugin.communicate(timeout=15)[1]
    assert plugin.returncode == 0, stderr


def test_the_runtime_table_lists_every_runtime() -> None:
    done = subprocess.run(["sh", "-ec", doc_command("docs/runtimes.md", ".venv/bin/python -m rplab.runtimes list")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    assert {"containerd-1.6", "dockerd-20.10"} <= {line.split()[0] for line in done.stdout.splitlines()}


def test_mkdocs_serve_serves_the_site(tmp_path: Path) -> None:
    """`.venv/bin/mkdocs serve` from the checkout (where setup.sh made .venv), in a network namespace of its own
    (its port is 8000); stopped once it serves."""
    if not (REPO_ROOT / ".venv" / "bin" / "mkdocs").is_file():
        pytest.skip("this checkout has no .venv (scripts/setup.sh makes it)")
    for command in {doc_command(page, ".venv/bin/mkdocs serve") for page in ("README.md", "docs/development.md")}:
        log = tmp_path / "mkdocs.log"
        with private_namespace("ip link set lo up") as namespace:
            serve = namespace.start(f"NO_MKDOCS_2_WARNING=1 exec {command}", REPO_ROOT, log)
            deadline = time.monotonic() + 60
            while "Serving on http://127.0.0.1:8000/" not in log.read_text():
                assert serve.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
            fetched = namespace.run("python3 -c \"import urllib.request; "
                                    "print(urllib.request.urlopen('http://127.0.0.1:8000/plugins/').status)\"",
                                    REPO_ROOT)
            assert fetched.stdout.strip() == "200", fetched.stderr
