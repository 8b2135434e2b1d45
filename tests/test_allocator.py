import pytest

from runtimeproxy import allocator


def test_applies_on_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in allocator._ENVIRONMENT_KEYS:
        monkeypatch.delenv(key, raising=False)
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


def test_the_trimmer_skips_a_heap_with_little_free(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "free_heap_bytes", lambda: 0)
    calls = [0]
    trimmer = allocator.IdleTrimmer(lambda: calls[0])
    calls[0] += 1
    trimmer.look()
    assert not trimmer.look()
