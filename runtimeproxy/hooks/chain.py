"""What one kubelet call's chain did: each plugin's step, what the applied answers changed, who collided with
whom, and what plugins in shadow would have changed. The steps may be of several plugin kinds (hooks.kinds): a
CreateContainer's hook plugins and then its NRI plugins are one chain, one record, one trace entry (hooks.step).

Collisions (containerd/nri's result.go fails a second plugin touching a field another owns; here the chain
goes on): a field is owned by the last plugin that changed it; a later plugin changing an owned field is a
collision between the owner and it, and the later plugin's value stands (file-name order decides, as it
decides the chain). Echoing a value is no change, so two plugins agreeing never collide.

Across kinds the same holds (an NRI plugin changing what a hook plugin set collides with it and stands); a
kind whose conflicts fail the call (NRI's) never gets here with two of its own plugins on one field, and
`counted_collisions` leaves such pairs to its fold (a field-level walk can see, e.g., one list where NRI owns
each entry).

Shadow: a plugin in shadow sees the request as the chain has it at its place and is merged privately; a
field it would set is a disagreement when the value applied in the end is another.

Field-level changes cost a walk over both messages: they are computed once the chain is done, and only
when something reads them (the trace is on, a second plugin changed the request, a plugin is in shadow, the
result failed validation).

Validation once over the whole result (containerd/nri's adaptation.go validates after the fold): `settle`, after
the chain's last plugin of any kind, checks the request as every plugin left it against the kubelet's
(hooks.validate.result_problem). A problem is blamed on the owner of the offending field (of a relation between
fields, the later of their owners) and refused by that answer's kind (hooks.step): the call fails, or the answer is
dropped whole, the result folded again from the answers kept (each answer's own changes, in order: an echo of a
dropped value is no change of the plugin that echoed it) and validated again, at most once per answer. Nothing
changed: nothing to validate.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, cast

from google.protobuf.message import Message

from runtimeproxy.hooks.changes import FieldChange, field_changes, with_changes
from runtimeproxy.hooks.kinds import Ownership, PluginKind
from runtimeproxy.hooks.trace import Collision, Step, TraceEntry, bounded_changes, kept_request
from runtimeproxy.hooks.validate import Problem, printable, result_problem


# A shadow's outcome counted by its kind: (it would have changed something, it disagrees with what was applied).
ShadowTally = Callable[[bool, bool], None]
# How an applied answer's kind refuses it once the result blamed it (hooks.step): its step marked refused, a
# HookFailed raised when that fails the call; returning, the call goes on without the answer.
Refusal = Callable[[Step, Problem], None]
Result = TypeVar("Result", bound=Message)


@dataclass
class _Answer:
    step: Step
    before: Message
    after: Message
    changes: list[FieldChange] | None = None  # computed once read
    tally: ShadowTally | None = None  # in shadow: who counts its outcome (its kind's statistics)
    refuse: Refusal | None = None  # applied: how its kind refuses it (None: it cannot be refused)

    def own_changes(self) -> list[FieldChange]:
        if self.changes is None:
            self.changes = field_changes(self.before, self.after)
        return self.changes


@dataclass(frozen=True)
class ShadowOutcome:
    plugin: str
    changed: bool
    disagreements: tuple[FieldChange, ...]
    tally: ShadowTally | None = None


class ChainRecord:
    def __init__(self, hook: str, request: Message, traced: bool) -> None:
        self.hook = hook
        self.original = request
        self.traced = traced
        self.unix_seconds = time.time()
        self.steps: list[Step] = []
        self._applied: list[_Answer] = []
        self._shadows: list[_Answer] = []
        self._kinds: dict[str, PluginKind] = {}  # the steps' plugins (toggle names) -> their kind
        self._settled = False

    def of_kind(self, plugin: str, kind: PluginKind) -> None:
        """A step's plugin (its toggle name) is of `kind` (hooks.step tells each step's kind)."""
        self._kinds[plugin] = kind

    def step(self, plugin: str, outcome: str, seconds: float = 0.0, shadow: bool = False, code: str = "",
             details: str = "") -> None:
        self.steps.append(Step(plugin, outcome, shadow, code, printable(details), seconds))

    def applied(self, before: Message, after: Message, refuse: Refusal | None = None) -> None:
        """The last step's answer was merged: `after` is the request it left; `refuse`: how its kind refuses it."""
        if after is not before:
            self._applied.append(_Answer(self.steps[-1], before, after, refuse=refuse))

    def settle(self, final: Result) -> Result:
        """The chain's result validated once (the first call; later ones return `final`): returns it, or the result
        folded again without the answers refused under policy Ignore. Raises the HookFailed of a refusal that
        fails the call."""
        if self._settled:
            return final
        self._settled = True
        while self._applied:  # each round drops one answer: at most one validation more per answer
            problem = result_problem(self.original, final)
            if problem is None:
                break
            answer, field = self._blamed(problem)
            if answer.refuse is not None:
                answer.refuse(answer.step, Problem(field, problem.reason, problem.fields))
            final = cast(Result, self._without(answer))  # of the type of the original: the chain's request
        return final

    def _blamed(self, problem: Problem) -> tuple[_Answer, str]:
        """The answer that set the latest of the problem's fields, and that field (as the problem names it)."""
        blamed = (self._applied[-1], problem.field)  # a field nobody changed cannot fail; kept safe
        for answer in self._applied:
            changed = [change.field for change in answer.own_changes()]
            owned = [field for field in problem.related
                     if any(name == field or name.startswith((field + "[", field + ".")) for name in changed)]
            if owned:
                named = problem.field if problem.field in owned or len(problem.related) == 1 else owned[0]
                blamed = (answer, named)
        return blamed

    def _without(self, refused: _Answer) -> Message:
        """The result folded again from the kept answers' own changes, in order; they are recorded as re-folded."""
        self._applied.remove(refused)
        result = self.original
        for answer in self._applied:
            changes = answer.own_changes()
            answer.before, answer.after, answer.changes = result, with_changes(result, changes), None
            result = answer.after
        return result

    def shadowed(self, before: Message, would_be: Message, tally: ShadowTally | None = None) -> None:
        """The last step (in shadow) would have left `would_be`; `tally` counts the outcome."""
        self._shadows.append(_Answer(self.steps[-1], before, would_be, tally=tally))

    @property
    def has_shadows(self) -> bool:
        return bool(self._shadows)

    def collisions(self) -> list[Collision]:
        """Fills each applied step's changes (when read) and returns the collisions, in chain order."""
        if not self.traced and len(self._applied) < 2:
            return []
        owners: dict[str, tuple[str, object]] = {}  # field -> (plugin, value it set)
        found = []
        for answer in self._applied:
            changes = answer.own_changes()
            plugin = answer.step.plugin
            for change in changes:
                owner = owners.get(change.field)
                if owner is not None and owner[0] != plugin:
                    found.append(Collision(change.field, owner[0], owner[1], plugin, change.after))
                owners[change.field] = (plugin, change.after)
            if self.traced:
                answer.step.changes = bounded_changes(changes)
        return found

    def counted_collisions(self, collisions: list[Collision]) -> list[Collision]:
        """The collisions the later-wins rule counts: all but those between two plugins of a kind whose own
        fold fails the call on a conflict (NRI's: a second plugin on a field it owns never gets this far)."""
        return [collision for collision in collisions if not self._one_conflict_kind(collision)]

    def _one_conflict_kind(self, collision: Collision) -> bool:
        earlier, later = self._kinds.get(collision.earlier_plugin), self._kinds.get(collision.later_plugin)
        return earlier is not None and earlier is later and earlier.ownership is Ownership.CONFLICT_FAILS

    def shadow_outcomes(self, final: Message) -> list[ShadowOutcome]:
        """Per answer in shadow: would it have changed anything, and where it differs from what was applied."""
        outcomes = []
        for answer in self._shadows:
            changes = field_changes(answer.before, answer.after)
            wanted = {change.field for change in changes}
            differences = [change for change in field_changes(final, answer.after) if change.field in wanted]
            answer.step.changes = bounded_changes(changes)
            answer.step.disagreements = bounded_changes(differences)
            outcomes.append(ShadowOutcome(answer.step.plugin, bool(changes), answer.step.disagreements,
                                          answer.tally))
        return outcomes

    def entry(self, target: str, final: Message, collisions: list[Collision], result: str,
              written_back: bool) -> TraceEntry:
        """The trace entry (after `collisions()`, which computes each applied answer's changes)."""
        sent = self._composed_changes() if written_back else []
        return TraceEntry(self.unix_seconds, self.hook, target, kept_request(self.original), type(self.original),
                          self.steps, tuple(collisions), result, bounded_changes(sent))

    def _composed_changes(self) -> list[FieldChange]:
        """The whole chain's changes, folded from each answer's (no second walk over the messages): per field,
        the value before the first change and after the last, unless they are equal."""
        first: dict[str, FieldChange] = {}
        last: dict[str, object] = {}
        for answer in self._applied:
            for change in answer.changes or ():
                first.setdefault(change.field, change)
                last[change.field] = change.after
        return [FieldChange(name, change.before, last[name]) for name, change in first.items()
                if change.before != last[name]]
