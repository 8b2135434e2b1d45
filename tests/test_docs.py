"""The docs site builds strictly: a broken link, anchor or page fails it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from docskit import REPO_ROOT


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(REPO_ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "plugins" / "index.html").is_file()
