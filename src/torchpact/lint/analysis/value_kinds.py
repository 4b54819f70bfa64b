"""What a value holds and how surely, as rules get it: the memo of ``kinds.kinds_of`` for one file, and
the evidence the current check relied on (``Recorder``), which every "yes" a rule gets notes into and
the engine reads at each hit."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Callable

from torchpact.findings import Evidence
from torchpact.lint.kinds import MUST, Kinds, Noted, Recorder, kinds_of, noted

if TYPE_CHECKING:
    from torchpact.lint.context import FileContext


class ValueKinds:
    """The kinds of one file's values, and the evidence of the current check."""

    def __init__(self, memo: dict[object, object]):
        # What the current rule's check relied on, and how surely (reset by the engine for each node).
        self.recorder = Recorder()
        # the per-file memo of rule helpers, which ``remember`` fills
        self._memo = memo
        # (id(expr), hints) -> kinds: the analysis's memo, the questions in progress, and as rules get them
        self.computed: dict[tuple[int, bool], Kinds] = {}
        self.active: set[tuple[int, bool]] = set()
        self._noted: dict[tuple[int, bool], Noted] = {}

    def of(self, ctx: FileContext, expr: ast.AST | None, hints: bool = True) -> Noted:
        """What ``expr`` holds, as far as local dataflow can tell (the kind constants; lint/kinds.py).
        Each "yes" a rule gets from it notes how surely it holds into the evidence of its next hit."""
        key = (id(expr), hints)
        found = self._noted.get(key)
        if found is None:
            found = self._noted[key] = noted(kinds_of(ctx, expr, hints), self.recorder)
        return found

    def note(self, evidence: Evidence, reason: str) -> None:
        """Weaken the evidence of the current check's next hits to ``evidence``, saying why: for what
        the rule relies on and the kinds analysis cannot see (a callee defined elsewhere that may
        zero the gradients, a value from an unresolved call)."""
        self.recorder.note(evidence.rank, reason)

    def remember(self, key: object, compute: Callable[[], object]) -> object:
        """``compute()`` once per file under ``key`` in the memo; the evidence noted while computing it
        is noted again on every later use, so a memoised fact weakens each hit that relies on it."""
        entry = self._memo.get(key)
        rec = self.recorder
        if entry is None:
            level, reasons = rec.level, rec.reasons
            rec.reset()
            try:
                value = compute()
            finally:
                got = (rec.level, tuple(rec.reasons))
                rec.level, rec.reasons = level, reasons
            entry = self._memo[key] = (value, *got)
        value, level, reasons = entry  # type: ignore[misc]
        if level < MUST:
            for why in reasons or (None,):
                rec.note(level, why)
        return value

    def unnoted(self, compute: Callable[[], object]) -> object:
        """``compute()`` with whatever it notes discarded: for a question whose answer cannot make a
        finding less sure (whether a loop binds its model anew asks what the model is, but a finding
        made when it does not rests on the binding, not on the model's kind)."""
        rec = self.recorder
        level, reasons = rec.level, rec.reasons
        rec.reasons = []
        try:
            return compute()
        finally:
            rec.level, rec.reasons = level, reasons
