"""The committed modules in runtimeproxy/pb must be what scripts/gen_protos.sh makes of protos/."""

import filecmp
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _files(top: Path) -> set[Path]:
    return {path.relative_to(top) for path in top.rglob("*") if path.is_file() and "__pycache__" not in path.parts}


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools (the 'test' extra) regenerates the modules")
    fresh = tmp_path / "pb"
    subprocess.run(["bash", str(ROOT / "scripts" / "gen_protos.sh"), str(fresh)], check=True, timeout=120,
                   env={**os.environ, "PYTHON": sys.executable})
    committed = ROOT / "runtimeproxy" / "pb"
    assert _files(fresh) == _files(committed), "run scripts/gen_protos.sh: files differ"
    stale = [str(name) for name in sorted(_files(fresh)) if not filecmp.cmp(fresh / name, committed / name, shallow=False)]
    assert not stale, f"stale generated modules, run scripts/gen_protos.sh: {stale}"
