"""Shared check for rules about one torch API that is deprecated, removed or private on torch 2.13.

Such a rule lists the qualified names it is about (``names``: old name -> drop-in replacement, or
None where the replacement is not a rename). torch warns (or raises) when a deprecated or removed
function runs, not when its name is looked up, so a use is flagged only where it runs the object:
called (``torch.cuda.amp.autocast(...)``, ``amp.GradScaler()``), applied as a decorator
(``@torch.cuda.amp.custom_fwd``), subclassed (the subclass's construction runs it), handed to
``functools.partial``, or bound to a name the file calls. A reference that is not called (kept in a
dict, saved to patch ``torch.x`` and restore it, an ``isinstance`` test, an annotation) runs
nothing and is not flagged, nor is an assignment to the name, nor code Python never evaluates
(under ``if TYPE_CHECKING:``, annotations under ``from __future__ import annotations``, a local
variable's annotation), nor code under a torch-version test that excludes torch 2.13
(lint/torch_version.py: ``if tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 9):``).
A rule about a private name (``references_count``) flags every reference:
the name itself may vanish. An import (``from torch.cuda.amp import autocast``) is flagged when the
file runs the imported name, or does not use it at all (a re-export); bare uses of a name imported
that way are not flagged a second time.

The autofix renames the written name where it is called and the replacement can be spelled from
the same import (``torch.ger`` -> ``torch.outer``), rewrites an import whose names all have drop-in
replacements in one module when every use of those names is a call, and a rule may build a
call-level fix (``fix_call``) where the arguments change too. Renaming a name that is also kept as a
reference would change what that reference holds (what a patch restores), so no fix is offered there.
"""

from __future__ import annotations

import ast
import re
import textwrap
from typing import ClassVar, Iterator

from torchpact.config import SUPPORTED_TORCH
from torchpact.findings import Evidence
from torchpact.lint.context import FileContext, canonical
from torchpact.lint.edits import Edit
from torchpact.lint.rule import Hit, Rule
from torchpact.lint.rules._silenced import silenced
from torchpact.lint.torch_version import evaluate, runs_on


# A test that picks code by torch version or feature: `if _TORCH_GREATER_EQUAL_2_4`,
# `torch.__version__ >= "2.0"`, `if hasattr(nn.utils.parametrizations, "weight_norm")`.
# Upper-case markers are matched as written: `is_torch_npu_available()` is a device test, not a version one.
_VERSION_TEST = re.compile(r"(?i:version|hasattr)|GREATER|LESS|_TORCH_|TORCH_\d|_GE_|_LT_")


_CALL_RULE = (
    "What counts as a use: torch warns (or raises) when the function runs, not when its name is looked "
    "up. A use is a call, a decorator, a base class (constructing the subclass runs it), a "
    "`functools.partial` of it, or a name bound to it that the file calls. A reference that is not "
    "called — kept in a dict, saved to patch `torch.x` and restore it, an `isinstance` test, an "
    "annotation — and an assignment to the name are not flagged. Nor is code Python never evaluates: "
    "imports and statements under `if TYPE_CHECKING:`, annotations under `from __future__ import "
    "annotations`, string annotations, annotations of a function's local variables, a branch that a "
    "test of `torch.__version__` (compared as a string, a parsed `packaging` version or a tuple, also "
    "through names bound to it) excludes on torch 2.13. An import is "
    "flagged when the file runs the imported name or does not use it at all (a re-export).")
_REFERENCE_RULE = (
    "What counts as a use: every reference to the name, called or not (kept in a dict, passed on, "
    "imported), since the name itself may vanish; an assignment to it is not flagged.")

_FIX_RULE = (
    "A fix is offered only where the name is called: a reference bound to another name is reported "
    "without one, and an import is rewritten only when every use of its name is a call, since "
    "renaming a saved original would change what a patch restores.")


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=100)


class ApiUse(Rule):
    """Base for rules that flag the use of particular torch names; subclasses set ``names``."""

    names: ClassVar[dict[str, str | None]] = {}
    # True for a private name, where the reference itself is the hazard (it may vanish in any release).
    references_count: ClassVar[bool] = False
    # The warning torch 2.13 emits for these names (its category and text), where known: a use
    # inside a `warnings.catch_warnings()` block that ignores that warning is deliberate, not flagged.
    warning_category: ClassVar[str | None] = None
    warning_text: ClassVar[str | None] = None
    nodes = (ast.Attribute, ast.ImportFrom)
    requires = ("the name resolves to one of the torch names above through the file's imports, outside "
                "version-guarded compatibility code",)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # the engine's pre-filters: check's own first test, and an import flagged names one of them
        cls.attrs = cls.imported = cls._last_parts()

    @classmethod
    def doc(cls) -> str:
        """The rule's docstring, with the conditions every such rule shares added to its sections."""
        text = super().doc()
        head, sep, rest = text.partition("\n## Why is this bad?")
        shared = _wrap(_REFERENCE_RULE if cls.references_count else _CALL_RULE)
        text = head.rstrip() + "\n\n" + shared + "\n" + sep + rest
        if cls.fixable:
            text = text.rstrip() + "\n\n" + _wrap(_FIX_RULE)
        return text

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        if isinstance(node, ast.ImportFrom):
            yield from self._check_import(node, ctx)
            return
        assert isinstance(node, ast.Attribute)
        if node.attr not in self._last_parts():
            return  # cheap filter: most attributes are not one of the names
        parent = ctx.parent(node)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return  # part of a longer dotted name; that one is judged
        if never_runs(node, ctx):
            return
        how = runs(node, ctx) if isinstance(node.ctx, ast.Load) else None
        if how is None and not (self.references_count and isinstance(node.ctx, ast.Load)):
            return  # ``torch.x = patched``, ``saved = torch.x``: nothing of the old API runs here
        qn = ctx.resolve(node)
        if qn not in self.names or not self.applies(node, ctx) or compat_fallback(node, ctx):
            return
        if not runs_on(node, ctx, SUPPORTED_TORCH):
            return  # under a version test that excludes the torch this deprecation is about
        if silenced(node, ctx, self.warning_category, self.warned_text(qn)):
            return  # the author ignores this very warning, in a scoped block: deliberate
        edits: list[Edit] = []
        if isinstance(parent, ast.Call) and parent.func is node:
            text = self.fix_call(parent, ctx, qn)
            if text is not None:
                edits = [ctx.locator.replace(parent, text)]
        # A rename is safe where the name is called; a reference kept under another name may also
        # be what a patch restores, which the rename would change.
        if not edits and self.fixable and how == CALLED:
            text = self.renamed(node, ctx, qn)
            if text is not None:
                edits = [ctx.locator.replace(node, text)]
        called = isinstance(parent, ast.Call) and parent.func is node
        message = self.describe_call(parent, ctx, qn) if called else None
        yield self.hit(node, subject=qn, message=message or self.describe(qn), fix_hint=self.hint(qn), edits=edits,
                       evidence=self.evidence(ctx, qn, called))

    def _check_import(self, node: ast.ImportFrom, ctx: FileContext) -> Iterator[Hit]:
        if node.module is None or node.level or never_runs(node, ctx):
            return
        found = [(a, canonical(f"{node.module}.{a.name}")) for a in node.names]
        found = [(a, qn) for a, qn in found if qn in self.names]
        if not found or compat_fallback(node, ctx) or not runs_on(node, ctx, SUPPORTED_TORCH):
            return
        uses = {a.asname or a.name: _uses(a.asname or a.name, ctx) for a, _ in found}
        # flagged where a use that runs the old API (any reference, for a private name) is not under a
        # scoped ignore of its warning, or where nothing uses the name (a re-export); references that
        # run nothing (a dict entry, a saved original, an annotation) do not count
        found = [(a, qn) for a, qn in found if self._import_flagged(a.asname or a.name, ctx)]
        if not found:
            return
        edits: list[Edit] = []
        targets = {(self.names[qn] or "").rpartition(".")[0] for _, qn in found}
        every_use_runs = all(how == CALLED for u in uses.values() for how in u)
        if (self.fixable and every_use_runs and len(found) == len(node.names)
                and len(targets) == 1 and "" not in targets):
            module = targets.pop()
            parts = []
            for alias, qn in found:
                new = (self.names[qn] or "").rpartition(".")[2]
                local = alias.asname or alias.name
                parts.append(new if new == local else f"{new} as {local}")
            edits = [ctx.locator.replace(node, f"from {module} import {', '.join(parts)}")]
        for i, (alias, qn) in enumerate(found):
            local = alias.asname or alias.name
            called = any(isinstance(c.func, ast.Name) and c.func.id == local for c in ctx.nodes(ast.Call))
            yield self.hit(node, subject=qn, message=self.describe(qn), fix_hint=self.hint(qn),
                           edits=edits if i == 0 else (), evidence=self.evidence(ctx, qn, called))

    def _import_flagged(self, name: str, ctx: FileContext) -> bool:
        reads = [n for n in ctx.nodes(ast.Name) if n.id == name and isinstance(n.ctx, ast.Load)]  # type: ignore[attr-defined]
        if not reads:
            return True
        if not self.references_count:
            reads = [n for n in reads if not never_runs(n, ctx) and runs(n, ctx) is not None]
        return any(not silenced(n, ctx, self.warning_category, self.warning_text)
                   and runs_on(n, ctx, SUPPORTED_TORCH) for n in reads)

    @classmethod
    def _last_parts(cls) -> frozenset[str]:
        cached = cls.__dict__.get("_last_parts_cache")
        if cached is None:
            cached = frozenset(qn.rsplit(".", 1)[-1] for qn in cls.names)
            cls._last_parts_cache = cached
        return cached

    # ------------------------------------------------------------------ for subclasses
    def warned_text(self, qn: str) -> str | None:
        """The text of the warning torch 2.13 emits for ``qn`` (the rule's ``warning_text`` by default)."""
        return self.warning_text

    def applies(self, node: ast.Attribute, ctx: FileContext) -> bool:
        """Whether this use is flagged (a rule may look at the call's arguments)."""
        return True

    def evidence(self, ctx: FileContext, qn: str, called: bool) -> Evidence | None:
        """What a use proves (``called``: the name is called there, or, for an import, somewhere in
        the file); None is ``may``. A rule whose consequence is the call's sets ``must`` for calls."""
        return None

    def describe(self, qn: str) -> str | None:
        """The finding's message for a use of ``qn``; None keeps the rule's ``message``."""
        return None

    def describe_call(self, call: ast.Call, ctx: FileContext, qn: str) -> str | None:
        """The message for this call of ``qn``, where its arguments change what is true; None: ``describe``."""
        return None

    def hint(self, qn: str) -> str | None:
        """The finding's fix hint for a use of ``qn``; None keeps the rule's ``fix_hint``."""
        return None

    def fix_call(self, call: ast.Call, ctx: FileContext, qn: str) -> str | None:
        """Replacement text for the whole call, where the arguments change too; None when not."""
        return None

    def renamed(self, node: ast.Attribute, ctx: FileContext, qn: str) -> str | None:
        """``node`` rewritten to its drop-in replacement, spelled from the same imported root."""
        new = self.names.get(qn)
        return respell(node, ctx, new) if new else None


CALLED, ALIASED = "called", "aliased"


def runs(node: ast.expr, ctx: FileContext, follow: bool = True) -> str | None:
    """How evaluating ``node`` runs the object it names: ``CALLED`` where it is called, applied as a
    decorator, subclassed or handed to ``functools.partial`` (which calls it); ``ALIASED`` where it
    is bound to a name (``amp_ctx = torch.cuda.amp.autocast if amp else nullcontext``) that the file
    calls; None for a reference that runs nothing (a dict entry, a saved original, an annotation)."""
    parent = ctx.parent(node)
    if isinstance(parent, ast.Call):
        if parent.func is node:
            return CALLED
        first = bool(parent.args) and parent.args[0] is node
        return CALLED if first and ctx.call_name(parent) == "functools.partial" else None
    if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return CALLED if node in parent.decorator_list or node in getattr(parent, "bases", ()) else None
    if not follow:
        return None
    value: ast.AST = node
    while isinstance(parent, (ast.IfExp, ast.BoolOp)) and value is not getattr(parent, "test", None):
        value, parent = parent, ctx.parent(parent)
    if isinstance(parent, (ast.Assign, ast.NamedExpr)) and parent.value is value:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        if any(CALLED in _uses(name, ctx, follow=False) for name in names):
            return ALIASED
    return None


def _uses(name: str, ctx: FileContext, follow: bool = True) -> list[str | None]:
    """For each read of the bare ``name`` in the file: how it runs the object (see ``runs``)."""
    return [None if never_runs(n, ctx) else runs(n, ctx, follow) for n in ctx.nodes(ast.Name)  # type: ignore[arg-type]
            if n.id == name and isinstance(n.ctx, ast.Load)]  # type: ignore[attr-defined]


def never_runs(node: ast.AST, ctx: FileContext) -> bool:
    """Whether Python never evaluates ``node``: it sits under ``if TYPE_CHECKING:``, or in an annotation
    that is not evaluated (every annotation under ``from __future__ import annotations``, and those of
    local variables in a function body)."""
    deferred = _postponed_annotations(ctx)
    child: ast.AST = node
    for anc in ctx.ancestors(node):
        if isinstance(anc, ast.If) and child in anc.body and _is_type_checking(anc.test, ctx):
            return True
        annotation = child is getattr(anc, "annotation", None) or child is getattr(anc, "returns", None)
        if annotation and (deferred or (isinstance(anc, ast.AnnAssign) and ctx.enclosing_function(anc) is not None)):
            return True
        child = anc
    return False


def _is_type_checking(test: ast.expr, ctx: FileContext) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or ctx.resolve(test) == "typing.TYPE_CHECKING"


def _postponed_annotations(ctx: FileContext) -> bool:
    found = ctx.memo.get("postponed_annotations")
    if found is None:
        found = ctx.memo["postponed_annotations"] = any(
            node.module == "__future__" and any(a.name == "annotations" for a in node.names)
            for node in ctx.tree.body if isinstance(node, ast.ImportFrom))
    return found  # type: ignore[return-value]


def compat_fallback(node: ast.AST, ctx: FileContext) -> bool:
    """Whether ``node`` is the old-torch branch of compatibility code: under a torch-version test, or
    in the ``except ImportError`` of a newer import. It does not run on torch 2.13."""
    if _default_replaced_when_available(node, ctx):
        return True
    for anc in ctx.ancestors(node):
        if isinstance(anc, ast.ExceptHandler):
            return True
        if isinstance(anc, (ast.If, ast.IfExp)) and _VERSION_TEST.search(ctx.locator.source(anc.test)):
            if not isinstance(evaluate(anc.test, ctx, SUPPORTED_TORCH), bool):
                return True  # a test lint cannot evaluate: taken for compatibility code
            # one it can evaluate decides through ``runs_on``: the branch torch 2.13 takes is no fallback
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return False
    return False


def _default_replaced_when_available(node: ast.AST, ctx: FileContext) -> bool:
    """``f = old`` followed by ``if hasattr(...)`` (or a version test) that rebinds ``f`` to the new name."""
    stmt = ctx.statement(node)
    if not (isinstance(stmt, ast.Assign) and stmt.value is node and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)):
        return False
    name = stmt.targets[0].id
    block = next((b for b in (getattr(ctx.parent(stmt), f, None) for f in ("body", "orelse", "finalbody"))
                  if isinstance(b, list) and stmt in b), [])
    for later in block[block.index(stmt) + 1:] if stmt in block else []:
        if isinstance(later, ast.If) and ("hasattr" in ctx.locator.source(later.test)
                                          or _VERSION_TEST.search(ctx.locator.source(later.test))):
            if any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
                   for b in later.body for n in ast.walk(b)):
                return True
    return False


def respell(node: ast.AST, ctx: FileContext, new: str) -> str | None:
    """``new`` (a dotted name) written from the root name ``node`` starts from, when its import allows."""
    root = node
    while isinstance(root, ast.Attribute):
        root = root.value
    if not isinstance(root, ast.Name):
        return None
    origin = ctx.aliases.get(root.id)
    if origin is None:
        return None
    if new == origin:
        return root.id
    if new.startswith(origin + "."):
        return root.id + new[len(origin):]
    return None


def call_text(ctx: FileContext, call: ast.Call, func: str, extra_first: list[str] = (),
              extra_last: list[str] = ()) -> str:
    """``func(<extra_first>, <the call's own arguments>, <extra_last>)`` as source text."""
    own = [ctx.locator.source(a) for a in call.args]
    own += [(f"{k.arg}=" if k.arg else "**") + ctx.locator.source(k.value) for k in call.keywords]
    return f"{func}({', '.join([*extra_first, *own, *extra_last])})"
