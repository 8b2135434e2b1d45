"""The journal of hooked calls in flight (hooks.journal): what a killed proxy leaves open, read by the next."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtimeproxy.hooks import journal as journal_module
from runtimeproxy.hooks.journal import (
    CREATE_CONTAINER, JOURNAL_FILE_NAME, START_CONTAINER, CallJournal, InFlight, read_open_entries,
)

CREATE = InFlight(CREATE_CONTAINER, "pod-1", "app", 2)
START = InFlight(START_CONTAINER, container_id="c-1")


def test_a_call_is_open_while_it_runs_and_closed_after_even_when_it_raises(tmp_path: Path) -> None:
    journal = CallJournal(tmp_path)
    assert journal.start() == [] and journal.enabled
    with journal.in_flight(CREATE):
        assert read_open_entries(tmp_path / JOURNAL_FILE_NAME) == [CREATE]
    with pytest.raises(RuntimeError), journal.in_flight(START):
        raise RuntimeError("the backend failed")
    assert read_open_entries(tmp_path / JOURNAL_FILE_NAME) == []


def test_the_next_proxy_gets_what_its_predecessor_left_open_and_starts_afresh(tmp_path: Path) -> None:
    killed = CallJournal(tmp_path)
    killed.start()
    calls = [killed.in_flight(call) for call in (CREATE, START, InFlight(CREATE_CONTAINER, "pod-2", "db", 0))]
    for call in calls:
        call.__enter__()
    calls[1].__exit__(None, None, None)  # the start was answered; the rest were in flight at the kill
    with (tmp_path / JOURNAL_FILE_NAME).open("ab") as torn:
        torn.write(b'{"b": 9, "call": "Crea')  # a write the crash tore
    successor = CallJournal(tmp_path)
    assert successor.start() == [CREATE, InFlight(CREATE_CONTAINER, "pod-2", "db", 0)]
    assert (tmp_path / JOURNAL_FILE_NAME).read_bytes() == b""


def test_no_state_directory_no_journal(tmp_path: Path) -> None:
    journal = CallJournal(None)
    assert journal.start() == [] and not journal.enabled
    with journal.in_flight(CREATE):
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_is_logged_once_and_never_fails_the_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    journal = CallJournal(tmp_path)
    journal.start()
    real_write = os.write

    def full(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal_module.os, "write", full)
    for _ in range(3):
        with journal.in_flight(CREATE):
            pass
    warnings = [r for r in caplog.records if "cannot write the journal" in r.getMessage()]
    assert len(warnings) == 1 and "No space left" in journal.problem
    monkeypatch.setattr(journal_module.os, "write", real_write)
    with journal.in_flight(START):
        pass
    assert journal.problem == ""


def test_past_its_size_the_journal_keeps_only_the_open_entries(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_module, "COMPACT_BYTES", 500)
    journal = CallJournal(tmp_path)
    journal.start()
    held = journal.in_flight(START)
    held.__enter__()
    for attempt in range(20):
        with journal.in_flight(InFlight(CREATE_CONTAINER, "pod-1", "app", attempt)):
            pass
    path = tmp_path / JOURNAL_FILE_NAME
    assert path.stat().st_size < 500 and read_open_entries(path) == [START]
    held.__exit__(None, None, None)
    assert read_open_entries(path) == []
