"""The docs site's pages as the tests read them: a block a page shows is the block the tests run."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS_DIR = REPO_ROOT / "docs"
README = REPO_ROOT / "README.md"


def doc_page(name: str) -> str:
    """The text of a page of docs/ (e.g. "install.md")."""
    return (DOCS_DIR / name).read_text()


def fenced_blocks(text: str, language: str) -> list[str]:
    """The bodies of the ```language blocks of a page, in order."""
    return [block.split("```", 1)[0] for block in text.split(f"```{language}\n")[1:]]


def block_after(text: str, marker: str, language: str) -> str:
    """The first ```language block after marker (an HTML comment naming the test that runs it)."""
    return fenced_blocks(text[text.index(marker):], language)[0]


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
