"""The docs site's pages as the tests read them: a block a page shows is the block the tests run.

Every shell block and inline command line of README.md and docs/*.md is either run by a test, which loads it with
`doc_block` or `doc_command` (tests/test_doc_blocks.py checks the claim), or preceded by a marker saying why not.
The markers are HTML comments, which the site does not show:

    <!-- run: ID -->  (on the line before a block; a test loads it as doc_block(PAGE, ID); free text may follow ID)
    <!-- not-run: REASON -->  (on the line before a block, or just before an inline command line)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS_DIR = REPO_ROOT / "docs"
README = REPO_ROOT / "README.md"

SHELL_LANGUAGES = ("sh", "bash", "console", "shell")
# The first word of a line a reader types: this project's commands and scripts, and the host's tools the pages use.
COMMAND = re.compile(r"(\$ )?(bash|sh|python3?|\.venv/bin/\S+|/opt/\S+/bin/\S+|runtimeproxyctl|koord-runtime-proxy"
                     r"|\$?crictl|systemctl|journalctl|apt-get|apt|pip|mkdocs|kubectl|scripts/\S+|go|dpkg|rpm|tar"
                     r"|install|ln|mkdir|docker|git|export|[A-Z_]+=\S*)(\s|$)")
RUN_MARKER = re.compile(r"^\s*<!-- run: ([\w.-]+)\b.*-->\s*$")
NOT_RUN_MARKER = re.compile(r"<!-- not-run:(.*?)-->")
# Inline spans that name a command or one of its operations in running text (its full line is shown elsewhere, or
# the text is about another program's operation): not lines to type.
MENTIONS = frozenset({
    "docker push", "docker pull", "docker import", "docker run", "docker exec", "docker inspect",
    "docker 20.10.24 (API 1.41)", "pip install", "pip install .", "pip install -e", "go test -c", "rpm --root",
    "dpkg -x", "apt-get download", "runtimeproxyctl trace", "runtimeproxyctl shadow", "runtimeproxyctl try-plugin",
    "python -m runtimeproxy", "python -m rplab.example_plugin --echo", "runtimeproxyctl --admin-endpoint PATH",
    "runtimeproxyctl try-plugin --cgroup-driver cgroupfs|systemd",
})
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_INLINE = re.compile(r"(<!-- not-run:(?:.*?)-->\s*)?(?<!`)`([^`]+?)`(?!`)")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the checkout: README.md, docs/install.md
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    marker: str  # the line before the fence ("" if blank)

    @property
    def run_id(self) -> str | None:
        match = RUN_MARKER.match(self.marker)
        return match.group(1) if match else None

    @property
    def not_run_reason(self) -> str | None:
        match = NOT_RUN_MARKER.search(self.marker)
        return match.group(1).strip() if match else None

    @property
    def is_shell(self) -> bool:
        """A shell block, or an unlabelled one holding command lines (diagrams, output and flags are not)."""
        if self.language in SHELL_LANGUAGES:
            return True
        return self.language == "" and any(COMMAND.match(line) for line in self.text.splitlines())


@dataclass(frozen=True)
class InlineCommand:
    page: str
    line: int
    text: str
    not_run_reason: str | None  # from a marker just before it


def doc_pages() -> list[str]:
    """README.md and every page of docs/, relative to the checkout."""
    return ["README.md", *(str(path.relative_to(REPO_ROOT)) for path in sorted(DOCS_DIR.glob("*.md")))]


def doc_page(name: str) -> str:
    """The text of a page of docs/ (e.g. "install.md"), or of README.md / docs/install.md named from the checkout."""
    path = REPO_ROOT / name if name.endswith(".md") and (name == "README.md" or name.startswith("docs/")) \
        else DOCS_DIR / name
    return path.read_text()


def blocks(page: str) -> list[Block]:
    """Every fenced block of a page, indented ones (in list items) dedented."""
    found = []
    lines = doc_page(page).splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, language, body = len(opening.group(1)), opening.group(2), []
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            body.append(lines[end][indent:])
            end += 1
        marker = lines[index - 1] if index > 0 else ""
        found.append(Block(page, index + 1, language, "".join(f"{line}\n" for line in body), marker))
        index = end + 1
    return found


def inline_commands(page: str) -> list[InlineCommand]:
    """The inline code spans outside blocks that start like a command line (COMMAND) and have an argument."""
    text = doc_page(page)
    for block in blocks(page):  # blank the blocks out, keeping line numbers
        lines = text.splitlines(keepends=True)
        start, end = block.line - 1, block.line + block.text.count("\n")
        text = "".join(lines[:start] + ["\n"] * (end + 1 - start) + lines[end + 1:])
    found = []
    for match in _INLINE.finditer(text):
        span = " ".join(match.group(2).split())  # a span may break across lines of a paragraph
        if COMMAND.match(span) and " " in span and span not in MENTIONS:
            reason = NOT_RUN_MARKER.search(match.group(1) or "")
            found.append(InlineCommand(page, text.count("\n", 0, match.start(2)) + 1, span,
                                       reason.group(1).strip() if reason else None))
    return found


def doc_block(page: str, block_id: str) -> str:
    """The body of the block a page marks `<!-- run: block_id -->`: the text a test runs as written."""
    [block] = [block for block in blocks(page) if block.run_id == block_id]
    return block.text


def doc_command(page: str, text: str) -> str:
    """An inline command line of a page, as written (it must be one: inline_commands)."""
    assert text in {command.text for command in inline_commands(page)}, f"{page} shows no command line `{text}`"
    return text


def fenced_blocks(text: str, language: str) -> list[str]:
    """The bodies of the ```language blocks of a page, in order."""
    return [block.split("```", 1)[0] for block in text.split(f"```{language}\n")[1:]]


def block_starting(text: str, first_line: str, language: str) -> str:
    """The one ```language block whose first line starts with first_line."""
    [block] = [block for block in fenced_blocks(text, language) if block.startswith(first_line)]
    return block


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The cells of each row of the first table after the line ``heading`` (its header and rule left out)."""
    lines = text[text.index(f"\n{heading}\n"):].splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows
