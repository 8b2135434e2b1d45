"""A guest for unit tests of what talks to rplab.guest: its shell records the scripts, no qemu runs."""

from __future__ import annotations

from pathlib import Path

from rplab.guest import Guest, GuestImage


class ScriptedGuest(Guest):
    """A guest whose shell records the scripts it is given and answers from `answers` (by the script's start; else
    nothing)."""

    def __init__(self, base: Path) -> None:
        super().__init__(base, GuestImage(base / "image"))
        self.scripts: list[str] = []
        self.answers: dict[str, str] = {}

    def shell(self, script: str, timeout: float = 60.0, check: bool = True) -> str:
        self.scripts.append(script)
        return next((answer for start, answer in self.answers.items() if script.startswith(start)), "")
