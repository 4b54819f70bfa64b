"""The bound on analyses that follow definitions (lint/analysis/following.py): cycles and long chains
of definitions end in the marked function's answer, and every recursion in lint that reads
definitions passes through a marked function."""

from __future__ import annotations

import ast
import pathlib
import sys

import pytest

from torchpact.lint.analysis import following
from torchpact.lint.analysis.following import LIMIT, follows_definitions
from tests.lint_helpers import lint_code

LINT = pathlib.Path(following.__file__).resolve().parents[1]
# What reads where a value was defined: a recursion through one of these follows definitions.
READS_DEFINITIONS = frozenset({"bindings", "values", "reaching", "passed_values", "assignments"})
# Guarded by their own memo and active set (the model of the shared bound).
OWN_GUARD = frozenset({"kinds_of"})


# Definitions that lead back to themselves, as every rule meets them (TP205 recursed without bound on
# the first shape, met in a dataset class: its ``_name_requires_grad`` and ``_computed_requires_grad``
# called each other without passing through the depth check of ``requires_grad``).
CYCLES = {
    "an attribute rebuilt through a local": """
        import numpy as np
        import torch

        class Table:
            def regroup(self):
                for i, key in enumerate(self.rows[self.key_field].numpy()):
                    print(i, key)
                picked = self.rows[np.arange(3)]
                picked.update({})
                self.rows = picked
    """,
    "an attribute rebound from itself": """
        import torch

        class Window:
            def advance(self, idx):
                self.buf = self.buf[idx].contiguous()
                return self.buf.numpy()
    """,
    "a loop that rebinds two names from each other": """
        import torch

        for _ in range(3):
            first = second[1:]
            second = first.float()
        print(second.numpy())
    """,
    "a cycle through a method that stores its argument": """
        import torch

        class Holder:
            def put(self, value):
                self.value = value[1:]

            def step(self, model):
                self.put(self.value)
                self.put(model(self.value).sum())
                return self.value.cpu().numpy()
    """,
    "a cycle through a method's return": """
        import torch
        import torch.nn as nn

        class Chain(nn.Module):
            def head(self):
                return self.state.float()

            def forward(self, x):
                self.state = self.head()[1:] + x
                return self.state.detach().numpy(), torch.round(self.state / self.head())
    """,
    "a self-referential module wrapper": """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        def train(model, data, opt):
            for x in data:
                model = DDP(model.to(0)) if x else model.module
                model.module(x).sum().backward()
                opt.step()
    """,
}


@pytest.mark.parametrize("name", CYCLES)
def test_no_rule_fails_on_definitions_that_form_a_cycle(name: str) -> None:
    findings, _ = lint_code(CYCLES[name], select=["TP"])
    assert [f.message for f in findings if f.code in ("TP001", "TP002")] == []


def test_a_cycle_answers_instead_of_recursing() -> None:
    calls = []

    @follows_definitions(False)
    def holds(name: str) -> bool:
        calls.append(name)
        return holds({"a": "b", "b": "a"}[name])

    assert holds("a") is False
    assert calls == ["a", "b"]  # ``b`` asks about ``a`` again: answered, not recursed


def test_a_long_chain_stops_at_the_limit() -> None:
    depth = []

    @follows_definitions(None)
    def walk(i: int) -> None:
        depth.append(i)
        return walk(i + 1)

    assert walk(0) is None
    assert len(depth) == LIMIT


def test_the_same_question_with_other_arguments_is_asked() -> None:
    @follows_definitions(-1)
    def count(n: int, seen: tuple[int, ...] = ()) -> int:
        return 0 if n == 0 else 1 + count(n - 1)

    assert count(10) == 10


def test_the_stack_is_left_empty_after_an_exception() -> None:
    @follows_definitions(None)
    def fails() -> None:
        raise ValueError

    try:
        fails()
    except ValueError:
        pass
    assert following._STACK.depth == 0 and not following._STACK.active


def _call_graph() -> tuple[dict[str, set[str]], set[str], set[str]]:
    """Function (``file:name``) -> functions it may call, those that read definitions, and the marked
    ones. A call resolves to the functions of that name in the same file, else to all of that name."""
    defined: dict[str, list[str]] = {}
    bodies: dict[str, list[ast.AST]] = {}
    marked: set[str] = set()
    for path in sorted(LINT.rglob("*.py")):
        where = str(path.relative_to(LINT))
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                key = f"{where}:{fn.name}"
                defined.setdefault(fn.name, []).append(key)
                bodies.setdefault(key, []).append(fn)
                if any(isinstance(d, ast.Call) and getattr(d.func, "id", None) == "follows_definitions"
                       for d in fn.decorator_list) or fn.name in OWN_GUARD:
                    marked.add(key)
    calls: dict[str, set[str]] = {}
    reads: set[str] = set()
    for key, fns in bodies.items():
        where = key.split(":")[0]
        out = calls[key] = set()
        for fn in fns:
            for node in ast.walk(fn):
                if not isinstance(node, ast.Call):
                    continue
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if name is None:
                    continue
                targets = defined.get(name, [])
                out.update([t for t in targets if t.startswith(where + ":")] or targets)
                if name in READS_DEFINITIONS and (
                        isinstance(f, ast.Name) or isinstance(f.value, (ast.Name, ast.Attribute))):
                    reads.add(key)
    return calls, reads, marked


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components that hold a cycle (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10000))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                found.append(sorted(comp))

    try:
        for v in list(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_every_recursion_that_reads_definitions_is_bounded() -> None:
    calls, reads, marked = _call_graph()
    unmarked = {n: {c for c in out if c not in marked} for n, out in calls.items() if n not in marked}
    unbounded = [c for c in _cycles(unmarked) if reads.intersection(c)]
    assert not unbounded, f"recursions through definitions with no @follows_definitions on them: {unbounded}"
