"""Finds every rule by walking ``torchpact.lint.rules``; nothing is registered by hand.

Linting runs from the rules' manifest (``lint/manifest.py``, generated from the rule classes by
``python -m torchpact.lint.write_manifest``; tests/test_lint_manifest.py fails when it is stale): what the
engine decides on before it runs a rule (its code, category, nodes, triggers and pre-filters) and
where the rule lives. A rule's module is imported only when a file gives the rule something to
check, so a one-file lint imports the few rules that file needs, not all of them.
"""

from __future__ import annotations

import ast
import importlib
from functools import lru_cache

from torchpact.findings import Category
from torchpact.lint.rule import CODE_PATTERN, Rule


class RegistryError(Exception):
    """Two rules share a code, or a rule is malformed; a bug in torchpact, caught by the tests."""


@lru_cache(maxsize=1)
def all_rules() -> tuple[type[Rule], ...]:
    """Every rule class, sorted by code (imports every rule module)."""
    import pkgutil

    import torchpact.lint.rules as package

    found: dict[str, type[Rule]] = {}
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (isinstance(obj, type) and issubclass(obj, Rule) and obj is not Rule
                    and obj.__module__ == module.__name__ and "code" in vars(obj)):
                if not CODE_PATTERN.match(obj.code):
                    raise RegistryError(f"{obj.__qualname__}: bad code {obj.code!r}")
                if obj.code in found:
                    raise RegistryError(f"{obj.code} is used by {found[obj.code].__qualname__} and {obj.__qualname__}")
                found[obj.code] = obj
    return tuple(found[c] for c in sorted(found))


# What the manifest holds of each rule, with the values a rule that does not set them has.
FILTER_DEFAULTS = {"triggers": Rule.triggers, "calls": Rule.calls, "attrs": Rule.attrs,
                   "imported": Rule.imported, "needs_torch_import": Rule.needs_torch_import,
                   "needs_import": Rule.needs_import}


class RuleSpec:
    """One rule as the manifest describes it: the attributes the engine reads before running the
    rule, under the names a :class:`Rule` has them. Calling it makes the rule (importing its module
    the first time)."""

    __slots__ = ("code", "category", "module", "qualname", "nodes", "triggers", "calls", "attrs",
                 "imported", "needs_torch_import", "needs_import", "_cls")
    code: str
    category: Category
    module: str
    qualname: str
    nodes: tuple[type[ast.AST], ...]
    triggers: tuple[str, ...]
    calls: frozenset[str]
    attrs: frozenset[str]
    imported: frozenset[str]
    needs_torch_import: bool
    needs_import: str | None

    def __init__(self, code: str, category: str, module: str, qualname: str, nodes: tuple[str, ...],
                 **filters):
        self.code, self.category = code, Category(category)
        self.module, self.qualname = module, qualname
        self.nodes = tuple(getattr(ast, n) for n in nodes)
        for name, default in FILTER_DEFAULTS.items():
            setattr(self, name, filters.pop(name, default))
        if filters:
            raise RegistryError(f"{code}: unknown manifest fields {sorted(filters)}")
        self._cls: type[Rule] | None = None

    def rule_class(self) -> type[Rule]:
        if self._cls is None:
            self._cls = getattr(importlib.import_module(self.module), self.qualname)
        return self._cls

    def __call__(self) -> Rule:
        return (self._cls or self.rule_class())()

    def __repr__(self) -> str:
        return f"RuleSpec({self.code}, {self.module}.{self.qualname})"


@lru_cache(maxsize=1)
def rule_specs() -> tuple[RuleSpec, ...]:
    """Every rule, from the manifest, sorted by code; imports no rule module."""
    from torchpact.lint.manifest import RULES

    return tuple(RuleSpec(**entry) for entry in RULES)


def declared_codes() -> frozenset[str]:
    """The rules' codes, without importing them: a fully cached run imports no rule at all."""
    return frozenset(s.code for s in rule_specs())


def rule_by_code(code: str) -> type[Rule] | None:
    code = code.upper()
    return next((r for r in all_rules() if r.code == code), None)
