"""The skip rule: pods labelled with the configured key=value get no hooks (both frontends)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass
class SkipRule:
    """Pods labelled key=value get no hooks."""

    key: str
    value: str

    def applies(self, labels: Mapping[str, str]) -> bool:
        return labels.get(self.key) == self.value
