"""Project-wide function summaries: what each function of the linted files does that rules in other
files need to know (it zeroes gradients, calls ``set_epoch``, switches a module to eval mode, saves
with ``torch.save``), and which dataset classes serve items already in memory (lint/datasets.py).

Each file's summary comes from lint's own parse of it (no second parse): every function is summarised
by bare name, and facts flow from callees to callers (``fit`` calls ``train_one_epoch``, which calls
``sampler.set_epoch``). A rule asking about another module's function is recorded; once every file
is summarised, only the files whose answers change are linted again with the facts (lint_paths).
Names are merged across files, which can only make rules quieter (a fact silences a finding, never
makes one), the safe direction for a linter.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from torchpact.lint.analysis.syntax import mentions_grad
from torchpact.lint.datasets import in_memory_classes
from torchpact.lint.tree_index import index_tree

ZERO_GRAD = "zero_grad"
SET_EPOCH = "set_epoch"
EVAL = "eval"
SAVE = "save"
# A class (by name) whose dataset items are already in memory (lint/datasets.py). A fact of the class
# itself: it does not flow to the functions that build one.
IN_MEMORY_ITEMS = "in_memory_items"
# A function whose every return is ``torch.meshgrid(...)`` (an ``ndgrid`` helper): its grids hold the
# values of its arguments (rules/numerics/_integers.py). A fact of the function itself.
RETURNS_GRID = "returns_grid"
_OWN_FACTS = frozenset({IN_MEMORY_ITEMS, RETURNS_GRID})

_TRIGGERS = ("zero_grad", ".grad =", ".grad=", "set_epoch", ".eval()", "torch.save(", "def __getitem__",
             "def __iter__", "meshgrid(")
_PROPAGATION_ROUNDS = 4


@dataclass
class FileSummary:
    """One file's functions: name -> facts it shows itself, and names it calls."""

    facts: dict[str, list[str]] = field(default_factory=dict)
    calls: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"facts": self.facts, "calls": self.calls}

    @classmethod
    def from_json(cls, data: dict) -> "FileSummary":
        return cls(facts=dict(data.get("facts", {})), calls=dict(data.get("calls", {})))


def summarize(text: str) -> FileSummary:
    """The facts of the functions in one file's text; empty when it mentions none or cannot parse."""
    if not mentions_facts(text):
        return FileSummary()
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return FileSummary()
    return summarize_tree(tree)


def mentions_facts(text: str) -> bool:
    """Whether a file's text can hold any fact (most files cannot: no walk for them)."""
    return any(t in text for t in _TRIGGERS)


def summarize_tree(tree: ast.Module, by_type: dict[type, list[ast.AST]] | None = None,
                   parents: dict[int, ast.AST] | None = None) -> FileSummary:
    """The facts of the functions of an already parsed file (lint's own parse: no second one). Each
    call and ``.grad`` write is attributed to its innermost function (a lambda's to the function it is
    in; nothing inside a class body outside its methods). ``by_type`` and ``parents`` are lint's index
    of the tree (engine.index), which spares a walk; without them the tree is indexed here the same way."""
    if by_type is None or parents is None:
        parents = {}
        by_type = index_tree(tree, parents)
    out = FileSummary()
    modules = {(a.asname or a.name).split(".")[0] for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    facts: dict[str, set[str]] = {}
    calls: dict[str, set[str]] = {}
    owners: dict[int, str | None] = {}  # id(parent) -> the function it belongs to, for siblings

    def owner(node: ast.AST) -> str | None:
        chain = []
        p = parents.get(id(node))
        fn = None
        while p is not None:
            known = owners.get(id(p), owners)
            if known is not owners:
                fn = known
                break
            chain.append(p)
            t = type(p)
            if t is ast.FunctionDef or t is ast.AsyncFunctionDef:
                fn = p.name  # type: ignore[attr-defined]
                break
            if t is ast.ClassDef:
                break
            p = parents.get(id(p))
        for c in chain:
            owners[id(c)] = fn
        return fn

    for call in by_type.get(ast.Call, ()):
        fn = owner(call)
        if fn is not None:
            _call_facts(call, facts.setdefault(fn, set()), calls.setdefault(fn, set()), modules)  # type: ignore[arg-type]
    for t in (ast.Assign, ast.Delete):
        for node in by_type.get(t, ()):
            if any(isinstance(x, ast.Attribute) and x.attr == "grad" for x in node.targets):  # type: ignore[attr-defined]
                fn = owner(node)
                if fn is not None:
                    facts.setdefault(fn, set()).add(ZERO_GRAD)  # ``p.grad = None``
    grids: dict[str, bool] = {}
    for node in by_type.get(ast.Return, ()):
        fn = owner(node)
        if fn is not None:
            value = node.value  # type: ignore[attr-defined]
            grids[fn] = grids.get(fn, True) and isinstance(value, ast.Call) and isinstance(
                value.func, ast.Attribute) and value.func.attr == "meshgrid" and isinstance(
                value.func.value, ast.Name) and value.func.value.id in modules
    for fn, grid in grids.items():
        if grid:
            facts.setdefault(fn, set()).add(RETURNS_GRID)
    if any(isinstance(n, ast.FunctionDef) and n.name in ("__getitem__", "__iter__")
           for n in by_type.get(ast.FunctionDef, ())):
        for name in in_memory_classes(tree):
            facts.setdefault(name, set()).add(IN_MEMORY_ITEMS)
    out.facts = {k: sorted(v) for k, v in facts.items() if v}
    out.calls = {k: sorted(v) for k, v in calls.items() if v}
    return out


def _call_facts(call: ast.Call, facts: set[str], calls: set[str], modules: set[str]) -> None:
    func = call.func
    if isinstance(func, ast.Attribute):
        attr = func.attr
        if attr == "zero_grad" or (attr == "zero_" and mentions_grad(func.value)):
            facts.add(ZERO_GRAD)
        elif attr == "set_epoch":
            facts.add(SET_EPOCH)
        elif attr == "eval" and not call.args:
            facts.add(EVAL)
        elif attr == "save" and isinstance(func.value, ast.Name) and func.value.id == "torch":
            facts.add(SAVE)
        elif isinstance(func.value, ast.Name) and func.value.id in modules:
            calls.add(attr)  # ``utils.helper(...)``; methods are not followed: ``x.step()`` could be anything
    elif isinstance(func, ast.Name):
        calls.add(func.id)


class ProjectFacts:
    """Facts of every function of the linted files, by bare name, callees' facts included."""

    def __init__(self, summaries: list[FileSummary] | None = None):
        facts: dict[str, set[str]] = {}
        calls: dict[str, set[str]] = {}
        for s in summaries or []:
            for name, fs in s.facts.items():
                facts.setdefault(name, set()).update(fs)
            for name, cs in s.calls.items():
                calls.setdefault(name, set()).update(cs)
        for _ in range(_PROPAGATION_ROUNDS):
            changed = False
            for name, callees in calls.items():
                gained = set().union(*(facts.get(c, ()) for c in callees)) - facts.get(name, set()) - _OWN_FACTS
                if gained:
                    facts.setdefault(name, set()).update(gained)
                    changed = True
            if not changed:
                break
        self.functions: dict[str, frozenset[str]] = {k: frozenset(v) for k, v in facts.items() if v}

    def has(self, function: str | None, fact: str) -> bool:
        """Whether a function of the project by that name does ``fact`` (itself or through calls)."""
        return bool(function) and fact in self.functions.get(function, ())  # type: ignore[arg-type]

    @property
    def fingerprint(self) -> str:
        """Changes whenever a fact changes: part of every cached file's key."""
        import hashlib  # the cache's: a run without it needs neither
        import json

        blob = json.dumps(sorted((k, sorted(v)) for k, v in self.functions.items()))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]
