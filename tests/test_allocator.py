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
