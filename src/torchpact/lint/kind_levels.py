"""How surely a value has a kind: the evidence levels, the reasons for a level below ``MUST``, the
``Kinds`` sets that carry a level per kind, and what rules get (``Noted`` sets, which note each "yes"
into the per-check ``Recorder``). See lint/kinds.py for the analysis that makes them.

No object here refers to the file's context, so the context, its memo and these sets form no
reference cycle (lint runs with the cyclic garbage collector off).
"""

from __future__ import annotations

from typing import Iterable

from torchpact.lint.kind_tables import PHRASE

# ------------------------------------------------------------------ levels
UNRESOLVED, MAY, MUST = 0, 1, 2
# A kind's entry: (level, why). ``why`` is None for MUST, else (format, name, kind) rendered by ``reason``.
Entry = tuple
SURE: Entry = (MUST, None)

WHY_PATHS = "`{name}` holds {kind} on some paths only"
WHY_BRANCH = "{kind} on one side of a conditional expression only"
WHY_HINT = "`{name}` is taken for {kind} by its name"
WHY_FIELD = "`.{name}` is taken for {kind} by its name"
WHY_BACKWARD = "`{name}` is taken for {kind} because `.backward()` is called on it"
WHY_INPUT = "the input of `{name}` is not resolved to {kind}"
WHY_OPTIONAL = "an Optional annotation allows None instead of {kind}"
WHY_CALLERS = "`{name}` receives {kind} from some of this file's calls only"
WHY_OPEN = "`{name}` is called here with {kind}, and other modules may call it with something else"


def reason(why: object) -> str:
    """A reason noted for a level below MUST, as the finding shows it."""
    if isinstance(why, tuple):
        fmt, name, kind = why
        return fmt.format(name=name, kind=PHRASE.get(kind, kind))
    return str(why)


class Kinds(frozenset):
    """A value's kinds, each with its level: ``levels[kind] = (level, why)``. Asking it a question
    notes nothing (the analysis itself works on these)."""

    __slots__ = ("levels",)
    levels: dict[str, Entry]


def make(levels: dict[str, Entry]) -> Kinds:
    k = frozenset.__new__(Kinds, levels)
    k.levels = levels
    return k


def of(kinds: Iterable[str], entry: Entry = SURE) -> Kinds:
    """These kinds, all at one level."""
    return make(dict.fromkeys(kinds, entry))


EMPTY = of(())


def each(kinds: Iterable[str], level: int, fmt: str, name: str, said: str | None = None) -> Kinds:
    """These kinds at ``level``, each with its reason (one reason for all when ``said`` names the kind
    the reason speaks of)."""
    if said is not None:
        return of(kinds, (level, (fmt, name, said)))
    return make({k: (level, (fmt, name, k)) for k in kinds})


def pick(src: Kinds, keep: Iterable[str]) -> Kinds:
    """The kinds of ``src`` that are in ``keep``, at their levels."""
    levels = src.levels
    return make({k: levels[k] for k in keep if k in levels})


def merge(*parts: Kinds) -> Kinds:
    """Every kind any part has, at the strongest level a part gives it (several facts for one value)."""
    parts = tuple(p for p in parts if p)
    if len(parts) < 2:
        return parts[0] if parts else EMPTY
    out = dict(parts[0].levels)
    for p in parts[1:]:
        for k, e in p.levels.items():
            have = out.get(k)
            if have is None or e[0] > have[0]:
                out[k] = e
    return make(out)


def join(alternatives: list[Kinds], name: str, fmt: str = WHY_PATHS) -> Kinds:
    """The kinds over alternative paths: MUST where every path has the kind at MUST; MAY where some
    path has it (at MAY or better) and another lacks it or is less sure; UNRESOLVED otherwise."""
    live = [a for a in alternatives if a is not alternatives[0]]
    if not live:
        return alternatives[0] if alternatives else EMPTY
    present: dict[str, None] = {}  # in the order the paths name them, not a set's (which varies per process)
    for a in alternatives:
        present.update(dict.fromkeys(a.levels))
    out: dict[str, Entry] = {}
    for k in present:
        weakest = best = None
        missing = False
        for a in alternatives:
            e = a.levels.get(k)
            if e is None:
                missing = True
                continue
            if weakest is None or e[0] < weakest[0]:
                weakest = e
            if best is None or e[0] > best[0]:
                best = e
        assert weakest is not None and best is not None
        if not missing and weakest[0] == MUST:
            out[k] = SURE
        elif best[0] >= MAY:
            out[k] = weakest if not missing and weakest[0] == MAY else (MAY, (fmt, name, k))
        else:
            out[k] = weakest
    return make(out)


def at_most(kinds: Iterable[str], entry: Entry | None) -> Kinds:
    """New kinds derived from a fact with ``entry``: they inherit its level."""
    return of(kinds, entry or SURE)


def strongest(src: Kinds, among: Iterable[str]) -> Entry | None:
    best = None
    for k in among:
        e = src.levels.get(k)
        if e is not None and (best is None or e[0] > best[0]):
            best = e
    return best


def weaker(a: Entry, b: Entry) -> Entry:
    return a if a[0] <= b[0] else b


# ------------------------------------------------------------------ what rules get
class Recorder:
    """The evidence noted while one rule checks one node: the weakest level of the answers it relied
    on, and why. The engine resets it before each ``rule.check(node)`` and reads it at each hit."""

    __slots__ = ("level", "reasons")

    def __init__(self) -> None:
        self.level = MUST
        self.reasons: list[object] = []

    def note(self, level: int, why: object = None) -> None:
        if level < MUST:
            if level < self.level:
                self.level = level
            if why is not None and why not in self.reasons:
                self.reasons.append(why)

    def reset(self) -> None:
        self.level = MUST
        self.reasons = []

    def rendered(self) -> list[str]:
        return [reason(w) for w in self.reasons]


class Noted(Kinds):
    """The kinds a rule gets from ``ctx.kinds``: a "yes" to a question notes its level."""

    __slots__ = ("recorder",)
    recorder: Recorder

    def __contains__(self, kind: object) -> bool:
        e = self.levels.get(kind)  # type: ignore[call-overload]
        if e is None:
            return False
        if e[0] < MUST:
            self.recorder.note(e[0], e[1])
        return True

    def __bool__(self) -> bool:
        levels = self.levels
        if not levels:
            return False
        # Ties broken by the kind's name: the levels' order can come from a set's, which differs per process
        # (string hash randomisation), and the reason noted here is the one a message quotes.
        _, best = max(levels.items(), key=_level_then_kind)
        if best[0] < MUST:
            self.recorder.note(best[0], best[1])
        return True

    def _view(self, kinds: Iterable[str]) -> "Noted":
        levels = self.levels
        return noted(make({k: levels.get(k, SURE) for k in kinds}), self.recorder)

    def __and__(self, other: object) -> "Noted":
        return self._view(frozenset.__and__(self, other))  # type: ignore[operator]

    __rand__ = __and__

    def __sub__(self, other: object) -> "Noted":
        return self._view(frozenset.__sub__(self, other))  # type: ignore[operator]

    def __or__(self, other: object) -> "Noted":
        return self._view(frozenset.__or__(self, other))  # type: ignore[operator]

    __ror__ = __or__

    def isdisjoint(self, other: Iterable[object]) -> bool:
        return not self & frozenset(other)


def _level_then_kind(item: tuple[str, Entry]) -> tuple[int, str]:
    return item[1][0], item[0]


def noted(raw: Kinds, recorder: Recorder) -> Noted:
    """``raw`` as rules see it: questions note into ``recorder``."""
    k = frozenset.__new__(Noted, raw)
    k.levels = raw.levels
    k.recorder = recorder
    return k
