import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtimeproxy import allocator


def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in allocator._ENVIRONMENT_KEYS:
        monkeypatch.delenv(key, raising=False)


def test_applies_on_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    _clean_environment(monkeypatch)
    assert allocator.tune_for_large_messages() is True


@pytest.mark.parametrize("key", ["MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"])
def test_the_operators_environment_wins(monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    monkeypatch.setenv(key, "1")
    assert allocator.tune_for_large_messages() is False


def test_free_heap_can_be_read_and_handed_back() -> None:
    assert isinstance(allocator.free_heap_bytes(), int)
    assert allocator.release_free_memory() is True


def test_the_trimmer_trims_once_after_calls_and_a_quiet_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []
    calls = [0]
    monkeypatch.setattr(allocator, "release_free_memory", lambda: trims.append(calls[0]) or True)
    monkeypatch.setattr(allocator, "free_heap_bytes", lambda: allocator.TRIM_WORTHWHILE_BYTES)
    trimmer = allocator.IdleTrimmer(lambda: calls[0])
    assert not trimmer.look()  # idle from the start: nothing to hand back
    for _ in range(3):  # busy: calls started in every interval
        calls[0] += 2
        assert not trimmer.look()
    assert trimmer.look()  # the first quiet interval
    assert not trimmer.look()  # still quiet: already handed back
    assert trims == [6]


def test_the_trimmers_looks_space_out_while_there_is_nothing_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "release_free_memory", lambda: True)
    monkeypatch.setattr(allocator, "free_heap_bytes", lambda: allocator.TRIM_WORTHWHILE_BYTES)
    calls = [0]
    trimmer = allocator.IdleTrimmer(lambda: calls[0])
    intervals = []
    for _ in range(6):  # idle from the start
        trimmer.look()
        intervals.append(trimmer.interval)
    assert intervals == [2.0, 4.0, 8.0, 16.0, 16.0, 16.0]
    calls[0] += 1  # a call: looked at every second again until it is trimmed
    trimmer.look()
    assert trimmer.interval == allocator.IDLE_CHECK_INTERVAL_SECONDS
    assert trimmer.look() and trimmer.interval == allocator.IDLE_CHECK_INTERVAL_SECONDS
    trimmer.look()
    assert trimmer.interval == 2.0


def test_the_trimmer_skips_a_heap_with_little_free(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "free_heap_bytes", lambda: 0)
    calls = [0]
    trimmer = allocator.IdleTrimmer(lambda: calls[0])
    calls[0] += 1
    trimmer.look()
    assert not trimmer.look()


def test_huge_page_tunables_carry_the_same_thresholds() -> None:
    tunables = dict(item.split("=") for item in allocator.huge_page_tunables().split(":"))
    assert tunables == {
        "glibc.malloc.hugetlb": "1",
        "glibc.malloc.mmap_threshold": str(allocator.MMAP_THRESHOLD_BYTES),
        "glibc.malloc.trim_threshold": str(allocator.TRIM_THRESHOLD_BYTES),
        "glibc.malloc.arena_max": str(allocator.ARENA_COUNT),
    }


@pytest.mark.parametrize(("text", "mode"), [
    ("always [madvise] never\n", "madvise"), ("[always] madvise never\n", "always"), ("garbled\n", None),
])
def test_reads_the_kernels_huge_page_mode(tmp_path: Path, text: str, mode: str | None) -> None:
    path = tmp_path / "enabled"
    path.write_text(text)
    assert allocator.transparent_huge_page_mode(path) == mode
    assert allocator.transparent_huge_page_mode(tmp_path / "missing") is None


@pytest.mark.parametrize(("mode", "wanted"), [("madvise", True), ("always", False), ("never", False), (None, False)])
def test_reexec_only_where_huge_pages_need_the_tunable(
    monkeypatch: pytest.MonkeyPatch, mode: str | None, wanted: bool
) -> None:
    _clean_environment(monkeypatch)
    monkeypatch.setattr(allocator, "transparent_huge_page_mode", lambda: mode)
    monkeypatch.setattr(allocator, "_glibc_version", lambda: (2, 36))
    assert allocator.wants_huge_pages_reexec() is wanted


def test_no_reexec_below_glibc_2_35_or_with_the_operators_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    _clean_environment(monkeypatch)
    monkeypatch.setattr(allocator, "transparent_huge_page_mode", lambda: "madvise")
    monkeypatch.setattr(allocator, "_glibc_version", lambda: (2, 31))
    assert allocator.wants_huge_pages_reexec() is False
    monkeypatch.setattr(allocator, "_glibc_version", lambda: (2, 36))
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
    assert allocator.wants_huge_pages_reexec() is False


def test_the_command_runs_with_huge_pages_where_the_kernel_offers_them(tmp_path: Path) -> None:
    """The real command re-executes itself once: same pid, the tunables in its environment."""
    if not allocator.wants_huge_pages_reexec():
        pytest.skip("this machine's glibc or THP mode gains nothing from the re-exec")
    environment = {key: value for key, value in os.environ.items() if key not in allocator._ENVIRONMENT_KEYS}
    socket = tmp_path / "rp.sock"
    proxy = subprocess.Popen(
        [sys.executable, "-m", "runtimeproxy", f"--koord-runtimeproxy-endpoint={socket}",
         f"--remote-runtime-service-endpoint={tmp_path / 'none.sock'}", f"--runtime-hook-config-dir={tmp_path}",
         f"--admin-endpoint={tmp_path / 'admin.sock'}", f"--state-dir={tmp_path / 'state'}", "--metrics-bind-address="],
        env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        environ = Path(f"/proc/{proxy.pid}/environ")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not socket.exists():
            time.sleep(0.05)
        assert socket.exists(), "the proxy never listened"
        # glibc cuts the variable's copy into pieces as it parses it: look for its start
        assert b"\0GLIBC_TUNABLES=glibc.malloc.hugetlb=1" in environ.read_bytes()
    finally:
        proxy.terminate()
        proxy.wait(10)
