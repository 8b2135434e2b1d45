"""CPU time and memory of the benchmark's processes, read from /proc (Linux only)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    """Fields of /proc/PID/stat after the command name (field 3, state, is index 0)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def _children(pid: int) -> list[int]:
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children.extend(int(child) for child in (task / "children").read_text().split())
        except OSError:  # the thread ended meanwhile
            pass
    return children


@dataclass(frozen=True)
class CpuUsage:
    """CPU seconds (user + kernel) and minor page faults of a process tree so far."""

    user: float
    system: float
    minor_faults: int

    @classmethod
    def of_tree(cls, pid: int) -> CpuUsage:
        """The process, its reaped children (socat forks one per connection) and its live descendants."""
        fields = _stat_fields(pid)
        user = (int(fields[11]) + int(fields[13])) / _TICKS_PER_SECOND  # utime + cutime
        system = (int(fields[12]) + int(fields[14])) / _TICKS_PER_SECOND  # stime + cstime
        faults = int(fields[7]) + int(fields[8])  # minflt + cminflt
        for child in _children(pid):
            try:
                usage = cls.of_tree(child)
            except OSError:  # exited between listing and reading
                continue
            user, system, faults = user + usage.user, system + usage.system, faults + usage.minor_faults
        return cls(user, system, faults)

    @property
    def cpu(self) -> float:
        return self.user + self.system

    def minus(self, before: CpuUsage) -> CpuUsage:
        return CpuUsage(self.user - before.user, self.system - before.system, self.minor_faults - before.minor_faults)


def memory_mb(pid: int, key: str = "VmRSS") -> float:
    """VmRSS (or VmHWM, the peak) of a process in MB (2**20 bytes), from /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key} in /proc/{pid}/status")


def threads_cpu_seconds(pid: int) -> float:
    """CPU time of the process's live threads in ns resolution (schedstat), for small idle figures.

    Time of threads that ended is not in it: use it over windows where no thread comes or goes.
    """
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except OSError:
            pass
    return total / 1e9
