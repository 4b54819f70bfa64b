"""The base every lint rule subclasses: one file, one class, carrying its docs, examples and check.

A rule declares which AST node types it wants (``nodes``) and, to keep lint fast on big trees, which
substrings a file must contain for the rule to be worth running (``triggers``). The engine parses the
file once, walks it once, and hands each rule only its nodes. ``check`` yields :class:`Hit` objects;
the engine turns them into :class:`~torchpact.findings.Finding` s with the rule's code and category,
and a severity it derives from the hit's evidence: the rule's ``severity`` is its ceiling, reached
only by a hit that claims ``must`` evidence (see :class:`Hit`).

The docstring is the rule's user documentation, in the sections "What it does", "Why is this bad?"
and "Fix safety" (each a ``## `` heading); "Example" and "Use instead" are rendered from the first
``invalid`` and ``valid`` snippet, which are also the rule's tests.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass
from typing import ClassVar, Iterable, Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.edits import Edit


@dataclass
class Hit:
    """What a rule reports; location from ``node`` (and ``end_node`` when the span is wider)."""

    node: ast.AST
    message: str | None = None
    subject: str | None = None
    fix_hint: str | None = None
    edits: tuple[Edit, ...] = ()
    end_node: ast.AST | None = None
    # Below the rule's own for deliberately lower advice (a bounded leak reported as info).
    severity: Severity | None = None
    # What the rule proved on this hit; None is ``may``. The engine takes the weaker of this and what
    # the analysis noted while the rule examined the node (``ctx.kinds``, ``ctx.note``), and caps the
    # severity by it: must -> error, may -> warning, unresolved -> info.
    evidence: Evidence | None = None


@dataclass(frozen=True)
class Invalid:
    """An invalid example: ``code`` must be reported; ``fixed`` is the exact autofix result, if any."""

    code: str
    fixed: str | None = None
    count: int = 1
    # The findings' severity when it is not the rule's own (evidence below must, or lower advice).
    severity: Severity | None = None
    # The findings' evidence, when the example pins it.
    evidence: Evidence | None = None


REQUIRED_SECTIONS = ("What it does", "Why is this bad?", "Fix safety")


class Rule:
    """Base class; subclasses live in ``torchpact/lint/rules/<category>/<pattern>.py``."""

    code: ClassVar[str]
    category: ClassVar[Category]
    # The severity of a finding with ``must`` evidence: the rule's ceiling (see ``Hit.evidence``).
    severity: ClassVar[Severity] = Severity.WARNING
    # The facts the rule relies on, in words, shown on its page ("the loop back-propagates").
    requires: ClassVar[tuple[str, ...]] = ()
    message: ClassVar[str]
    fix_hint: ClassVar[str | None] = None
    nodes: ClassVar[tuple[type[ast.AST], ...]] = ()
    triggers: ClassVar[tuple[str, ...]] = ("torch",)
    # Pre-filters the engine applies before ``check``, for rules that would return at once on other
    # nodes: only calls whose callee's last name or attribute is in ``calls`` (``opt.step()``,
    # ``step()``), only attributes whose ``.attr`` is in ``attrs``. Empty: every node of the type.
    calls: ClassVar[frozenset[str]] = frozenset()
    attrs: ClassVar[frozenset[str]] = frozenset()
    # Only ``from m import n`` statements that import a name in ``imported``.
    imported: ClassVar[frozenset[str]] = frozenset()
    needs_torch_import: ClassVar[bool] = True
    # Another package the file must import for the rule to find anything (``"torchvision"`` for a rule
    # about torchvision's API): the rule is skipped, before any parse, where it is not imported.
    needs_import: ClassVar[str | None] = None
    fixable: ClassVar[bool] = False
    # The fix may change what the program does beyond rounding (which parameters exist, train or are saved
    # -- state_dict keys --, which tensors get gradients, what runs, outputs in some mode), so its page's
    # "Fix safety" asks for a review: `--fix` leaves it out, `--fix --unsafe-fixes` applies it (as ruff).
    unsafe_fix: ClassVar[bool] = False
    facts: ClassVar[tuple[str, ...]] = ()
    # Why no test in tests/proofs executes this rule's pitfall (e.g. "needs CUDA"); None when one does.
    proof: ClassVar[str | None] = None
    valid: ClassVar[list[str]] = []
    invalid: ClassVar[list[Invalid | str]] = []

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:  # pragma: no cover - abstract
        raise NotImplementedError
        yield

    # ------------------------------------------------------------------ helpers for subclasses
    def hit(self, node: ast.AST, message: str | None = None, *, subject: str | None = None,
            fix_hint: str | None = None, edits: Iterable[Edit] = (), end_node: ast.AST | None = None,
            severity: Severity | None = None, evidence: Evidence | None = None) -> Hit:
        return Hit(node=node, message=message, subject=subject, fix_hint=fix_hint,
                   edits=tuple(edits), end_node=end_node, severity=severity, evidence=evidence)

    # ------------------------------------------------------------------ metadata
    @classmethod
    def name(cls) -> str:
        """The pattern's slug: the file name of the rule's module."""
        return cls.__module__.rsplit(".", 1)[-1].replace("_", "-")

    @classmethod
    def doc(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")

    @classmethod
    def summary(cls) -> str:
        """The docstring's first paragraph, on one line (it may be wrapped in the source)."""
        return " ".join(cls.doc().split("\n\n", 1)[0].split())

    @classmethod
    def sections(cls) -> dict[str, str]:
        """The docstring's ``## `` sections by title."""
        out: dict[str, str] = {}
        parts = re.split(r"^## +(.+)$", cls.doc(), flags=re.M)
        for title, body in zip(parts[1::2], parts[2::2], strict=True):  # one group: [head, title, body, ...]
            out[title.strip()] = body.strip()
        return out

    @classmethod
    def invalid_examples(cls) -> list[Invalid]:
        return [e if isinstance(e, Invalid) else Invalid(e) for e in cls.invalid]


def last_names(*qualnames: Iterable[str]) -> frozenset[str]:
    """The last parts of qualified names (``torch.load`` -> ``load``), for a rule's ``calls``."""
    return frozenset(qn.rpartition(".")[2] for names in qualnames for qn in names)


CODE_PATTERN = re.compile(r"^TP\d{3}$")
