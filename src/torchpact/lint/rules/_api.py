"""Shared check for rules about one torch API that is deprecated, removed or private on torch 2.13.

Such a rule lists the qualified names it is about (``names``: old name -> drop-in replacement, or
None where the replacement is not a rename). A use is flagged where the full dotted name is written
(``torch.cuda.amp.autocast(...)``, ``@torch.cuda.amp.custom_fwd``, ``amp.GradScaler()``) and where
the name is imported (``from torch.cuda.amp import autocast``); bare uses of a name imported that
way are not flagged a second time. The autofix renames the written name when the replacement can be
spelled from the same import (``torch.ger`` -> ``torch.outer``), rewrites an import whose names all
have drop-in replacements in one module, and a rule may build a call-level fix (``fix_call``) where
the arguments change too.
"""

from __future__ import annotations

import ast
import re
from typing import ClassVar, Iterator

from torchpact.findings import Evidence
from torchpact.lint.context import FileContext, canonical
from torchpact.lint.edits import Edit
from torchpact.lint.rule import Hit, Rule
from torchpact.lint.rules._silenced import all_uses_silenced, silenced


# A test that picks code by torch version or feature: `if _TORCH_GREATER_EQUAL_2_4`,
# `torch.__version__ >= "2.0"`, `if hasattr(nn.utils.parametrizations, "weight_norm")`.
# Upper-case markers are matched as written: `is_torch_npu_available()` is a device test, not a version one.
_VERSION_TEST = re.compile(r"(?i:version|hasattr)|GREATER|LESS|_TORCH_|TORCH_\d|_GE_|_LT_")


class ApiUse(Rule):
    """Base for rules that flag the use of particular torch names; subclasses set ``names``."""

    names: ClassVar[dict[str, str | None]] = {}
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
        qn = ctx.resolve(node)
        if qn not in self.names or not self.applies(node, ctx) or compat_fallback(node, ctx):
            return
        if silenced(node, ctx, self.warning_category, self.warning_text):
            return  # the author ignores this very warning, in a scoped block: deliberate
        edits: list[Edit] = []
        if isinstance(parent, ast.Call) and parent.func is node:
            text = self.fix_call(parent, ctx, qn)
            if text is not None:
                edits = [ctx.locator.replace(parent, text)]
        if not edits and self.fixable:
            text = self.renamed(node, ctx, qn)
            if text is not None:
                edits = [ctx.locator.replace(node, text)]
        called = isinstance(parent, ast.Call) and parent.func is node
        yield self.hit(node, subject=qn, message=self.describe(qn), fix_hint=self.hint(qn), edits=edits,
                       evidence=self.evidence(ctx, qn, called))

    def _check_import(self, node: ast.ImportFrom, ctx: FileContext) -> Iterator[Hit]:
        if node.module is None or node.level:
            return
        found = [(a, canonical(f"{node.module}.{a.name}")) for a in node.names]
        found = [(a, qn) for a, qn in found if qn in self.names]
        if not found or compat_fallback(node, ctx):
            return
        if all_uses_silenced({a.asname or a.name for a, _ in found}, ctx, self.warning_category, self.warning_text):
            return
        edits: list[Edit] = []
        targets = {(self.names[qn] or "").rpartition(".")[0] for _, qn in found}
        if self.fixable and len(found) == len(node.names) and len(targets) == 1 and "" not in targets:
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

    @classmethod
    def _last_parts(cls) -> frozenset[str]:
        cached = cls.__dict__.get("_last_parts_cache")
        if cached is None:
            cached = frozenset(qn.rsplit(".", 1)[-1] for qn in cls.names)
            cls._last_parts_cache = cached
        return cached

    # ------------------------------------------------------------------ for subclasses
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


def compat_fallback(node: ast.AST, ctx: FileContext) -> bool:
    """Whether ``node`` is the old-torch branch of compatibility code: under a torch-version test, or
    in the ``except ImportError`` of a newer import. It does not run on torch 2.13."""
    if _default_replaced_when_available(node, ctx):
        return True
    for anc in ctx.ancestors(node):
        if isinstance(anc, ast.ExceptHandler):
            return True
        if isinstance(anc, (ast.If, ast.IfExp)) and _VERSION_TEST.search(ctx.locator.source(anc.test)):
            return True
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
