"""The write-ahead journal of hooked calls in flight: what a proxy killed mid-call leaves its successor to finish.

A CreateContainer or StartContainer the proxy relays (Docker mode: a container's create or start) is written here before the runtime is asked (`begin`: the
call, the pod, the container's name and attempt or ID) and closed (`end`) once the call is over, just before the
answer goes back to the kubelet. An entry still open when the next proxy starts names a call whose answer never
reached the kubelet: hooks.reconcile decides what becomes of its container.

Cheap and crash-safe without fsync: one JSON line per record, one `write(2)` on an `O_APPEND` descriptor, so a
`kill -9` loses nothing the kernel has taken (a machine crash may lose the tail: the kubelet restarts then too,
and a torn last line is skipped). The file is in the state directory, one per proxy (its lock: hooks.service);
past `COMPACT_BYTES` it is rewritten with only the open entries (a new file renamed over the old one). A write
that fails (the state directory's disk full, read-only) is logged once per streak and the call goes on: the
journal never fails nor blocks a kubelet call; what it could not record is not reconciled. No state directory:
no journal.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

log = logging.getLogger(__name__)

JOURNAL_FILE_NAME = "calls-in-flight.journal"
COMPACT_BYTES = 256 * 1024  # rewritten with only the open entries past this size

CREATE_CONTAINER = "CreateContainer"
START_CONTAINER = "StartContainer"


@dataclass(frozen=True)
class InFlight:
    """One journaled call: CreateContainer names its container by pod, name and attempt (the runtime has not
    given it an ID yet); StartContainer by ID."""

    call: str
    pod_id: str = ""
    name: str = ""
    attempt: int = 0
    container_id: str = ""


class CallJournal:
    def __init__(self, state_dir: Path | None) -> None:
        self.path = state_dir / JOURNAL_FILE_NAME if state_dir is not None else None
        self._fd = -1
        self._bytes = 0
        self._seq = 0
        self._open: dict[int, InFlight] = {}
        self.problem = ""  # the last write's error, "" while writes succeed

    @property
    def enabled(self) -> bool:
        return self._fd >= 0

    def start(self) -> list[InFlight]:
        """The calls the predecessor left open (read once), then a fresh journal for this process."""
        if self.path is None:
            return []
        leftovers = read_open_entries(self.path)
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600)
        except OSError as error:
            log.warning("cannot keep the journal of calls in flight at %s (%s): a crash mid-create is not "
                        "reconciled", self.path, error)
            self.problem = str(error)
        return leftovers

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @contextlib.contextmanager
    def in_flight(self, call: InFlight) -> Iterator[None]:
        """The call is journaled while the block runs (nothing when there is no journal)."""
        if self._fd < 0:
            yield
            return
        self._seq += 1
        seq = self._seq
        self._open[seq] = call
        self._write(_begun(seq, call))
        try:
            yield
        finally:
            del self._open[seq]
            self._write({"e": seq})
            if self._bytes > COMPACT_BYTES:
                self._compact()

    def _write(self, record: dict[str, object]) -> None:
        if self._fd < 0:  # closed at the proxy's stop while a call was still in flight: it ended with the process
            return
        line = orjson.dumps(record) + b"\n"
        try:
            os.write(self._fd, line)
        except OSError as error:
            if not self.problem:
                log.warning("cannot write the journal of calls in flight %s (%s); calls go on, and one interrupted "
                            "meanwhile is not reconciled after a restart", self.path, error)
            self.problem = str(error)
            return
        if self.problem:
            log.info("the journal of calls in flight %s is written again", self.path)
            self.problem = ""
        self._bytes += len(line)

    def _compact(self) -> None:
        """Only the open entries, in a new file renamed over the old one (a crash leaves one or the other)."""
        assert self.path is not None
        temporary = self.path.with_name(self.path.name + ".new")
        lines = b"".join(orjson.dumps(_begun(seq, call)) + b"\n" for seq, call in self._open.items())
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, lines)
                os.replace(temporary, self.path)
            except OSError:
                os.close(fd)
                raise
        except OSError as error:
            log.warning("cannot compact the journal of calls in flight %s: %s", self.path, error)
            self._bytes = 0  # try again after as many bytes more
            return
        os.close(self._fd)
        self._fd, self._bytes = fd, len(lines)


def _begun(seq: int, call: InFlight) -> dict[str, object]:
    """A begin record (by hand: dataclasses.asdict costs ten times the write)."""
    return {"b": seq, "call": call.call, "pod_id": call.pod_id, "name": call.name, "attempt": call.attempt,
            "container_id": call.container_id}


def read_open_entries(path: Path) -> list[InFlight]:
    """The entries begun and never ended, in order; a line that cannot be read (torn by a crash) is skipped."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as error:
        log.warning("cannot read the journal of calls in flight %s: %s", path, error)
        return []
    begun: dict[int, InFlight] = {}
    for line in data.splitlines():
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(record, dict):
            continue
        if isinstance(record.get("e"), int):
            begun.pop(record["e"], None)
        elif isinstance(record.get("b"), int):
            entry = _entry(record)
            if entry is not None:
                begun[record["b"]] = entry
    return list(begun.values())


def _entry(record: dict[str, object]) -> InFlight | None:
    call, attempt = record.get("call"), record.get("attempt", 0)
    texts = [record.get(name, "") for name in ("pod_id", "name", "container_id")]
    if call not in (CREATE_CONTAINER, START_CONTAINER) or not isinstance(attempt, int):
        return None
    if not all(isinstance(text, str) for text in texts):
        return None
    pod_id, name, container_id = (str(text) for text in texts)
    return InFlight(str(call), pod_id, name, attempt, container_id)
