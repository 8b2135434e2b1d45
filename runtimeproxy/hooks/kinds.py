"""The plugin kinds the core runs, one row each: what differs between a hook plugin and an NRI plugin.

Everything else of a chain step (toggle, shadow, timing, statistics, validation, trace: hooks.step) is one
code path for both; a kind only supplies its row:

- `prefix`: how the node's toggles, the trace and `runtimeproxyctl` name its plugins (`""`: a config file
  name, `koordlet.json`; `"nri:"`: an NRI plugin's index and name, `nri:10-resource-policy`, a name no
  config file can have);
- `scope_names`: what one of its toggles can turn off (a hook plugin's hooks, an NRI plugin's events), in
  lifecycle order, with `scope_noun` / `scope_word` for the sentences that name them;
- `trace_prefix`: the trace's hook column ("PreCreateContainer"; "NRI CreateContainer");
- `ownership`: two plugins setting one field — `LATER_WINS` (koordinator's chain: the later plugin in file
  order wins, the collision is counted and logged) or `CONFLICT_FAILS` (containerd/nri's result.go: the
  second plugin's answer fails the call; nri.adjust enforces it while folding the answers);
- `failure`: what a failed call does — `POLICY` (the plugin's failure-policy: `Fail` fails a pre-hook's call,
  `Ignore` goes on without it) or `NRI` (containerd's: a timeout or a broken connection detaches the plugin
  and the call goes on; an error answered to an event in `failing_scopes` fails the call; other errors are
  logged). `failure_text` words a failure the kubelet gets in the kind's own terms.

The NRI wire lives in runtimeproxy.nri; the core knows NRI only as this row and its event table (hooks.nri_events,
which says which events' errors fail the call).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from runtimeproxy.hooks import nri_events
from runtimeproxy.hooks.names import HOOK_NAMES, hook_named


class Ownership(enum.Enum):
    LATER_WINS = "later-wins"
    CONFLICT_FAILS = "conflict-fails"


class FailureRule(enum.Enum):
    POLICY = "failure-policy"
    NRI = "detach-or-error"


@dataclass(frozen=True)
class PluginKind:
    name: str  # "hook", "NRI": as a sentence names the kind
    prefix: str
    scope_names: tuple[str, ...]
    scope_named: Callable[[str], str | None]  # a person's spelling of a scope, without case
    scope_noun: str  # "hook", "NRI event"
    scope_word: str  # "hooks", "events": also the key of a toggle's scopes in the state file
    scope_article: str  # "a" hook, "an" NRI event
    trace_prefix: str
    ownership: Ownership
    failure: FailureRule
    failing_scopes: frozenset[str] = frozenset()  # FailureRule.NRI: the events whose error answer fails the call

    def toggle_name(self, plugin: str) -> str:
        """The name the node's toggles and the trace give a plugin of this kind."""
        return self.prefix + plugin

    def trace_hook(self, scope: str) -> str:
        return self.trace_prefix + scope

    def error_fails_call(self, scope: str, pre_hook: bool, policy_fails: bool) -> bool:
        """Whether an error answer (or an unusable one) of a plugin not in shadow fails the call."""
        if self.failure is FailureRule.POLICY:
            return pre_hook and policy_fails
        return scope in self.failing_scopes

    def failure_text(self, point: str, scope: str, plugin: str, endpoint: str, code: str, details: str) -> str:
        """The failure as the kubelet (or the Docker client) is told it."""
        if self.failure is FailureRule.POLICY:
            return (f"runtimeproxy: {point} hook of plugin {plugin} (unix://{endpoint}) failed with failure-policy "
                    f"Fail: {code}: {details}")
        return (f"runtimeproxy: NRI plugin {plugin} (unix://{endpoint}) failed {scope}, which fails the call as "
                f"containerd's NRI does: {code}: {details}")

    def fails_clause(self) -> str:
        """How the trace's result says why a failure failed the call ("under failure-policy Fail")."""
        return " under failure-policy Fail" if self.failure is FailureRule.POLICY else ""


HOOK = PluginKind(
    name="hook", prefix="", scope_names=HOOK_NAMES, scope_named=hook_named, scope_noun="hook", scope_word="hooks",
    scope_article="a", trace_prefix="", ownership=Ownership.LATER_WINS, failure=FailureRule.POLICY,
)
NRI = PluginKind(
    name="NRI", prefix="nri:", scope_names=nri_events.EVENT_NAMES, scope_named=nri_events.event_named,
    scope_noun="NRI event", scope_word="events", scope_article="an", trace_prefix="NRI ",
    ownership=Ownership.CONFLICT_FAILS, failure=FailureRule.NRI, failing_scopes=nri_events.FAILING,
)
KINDS: tuple[PluginKind, ...] = (HOOK, NRI)


def kind_of(toggle_name: str) -> PluginKind:
    """The kind a toggle name (`koordlet.json`, `nri:10-name`) belongs to: the longest prefix it has."""
    for kind in KINDS:
        if kind.prefix and toggle_name.startswith(kind.prefix):
            return kind
    return HOOK
