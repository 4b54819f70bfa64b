"""Whether the value an in-place write reaches is a leaf that requires grad, on every path (TP202).

One structured pass over the statements of the write's scope, for the one name (``w``) or attribute
(``self.w``) written, up to the write: a binding replaces what the name holds, ``if`` joins its
branches, a loop's head holds what enters it plus every binding in its body, and a path that leaves
(``return``/``raise``/``continue``/``break``) holds nothing further. Three facts are tracked per path:

- ``LEAF``: bound here to a leaf that requires grad (``nn.Parameter(...)``, ``torch.randn(...,
  requires_grad=True)``, a loop over ``.parameters()``);
- ``PLAIN``: bound here to anything else, or narrowed by a test that excludes the leaf case: the write
  sits in the branch where ``isinstance(v, nn.Parameter)`` / ``v.requires_grad`` is false, or after an
  ``if`` whose body leaves when it is true;
- ``ENTRY``: nothing in the scope bound it on this path: what the object holds when the method starts,
  i.e. any binding of ``self.w`` in the class's methods (of a global name, in the module).

A ``self.w`` bound to a Parameter in one method and to a plain tensor in another is a leaf on some
paths only; the rule does not report it (the analysis cannot see which one the write meets).
"""

from __future__ import annotations

import ast
from typing import Iterable

from torchpact.lint.context import FileContext
from torchpact.lint.rules.autograd._util import creates_grad_leaf, name_key, note_parameters_of, parameter_loop_binding

LEAF, PLAIN, ENTRY = "leaf", "plain", "entry"
_PARAMETER = {"torch.nn.Parameter", "torch.nn.parameter.Parameter"}
_TRY = (ast.Try, getattr(ast, "TryStar", ast.Try))
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def leaf_on_every_path(ctx: FileContext, write: ast.AST, target: ast.AST) -> bool:
    """Whether ``target`` (a name or ``obj.attr``), where ``write`` changes it in place, holds a leaf
    requiring grad on every path that reaches the write."""
    key = name_key(target)
    if key is None:
        return False
    scope = ctx.scope(write)
    body = scope.body if isinstance(getattr(scope, "body", None), list) else []
    on_path = {id(a) for a in ctx.ancestors(write)} | {id(write)}
    flow = _KeyFlow(ctx, key, on_path)
    state = _initial(scope, key)
    found = flow.run(body, state)
    if not found:
        return False  # the write is unreachable for this name, or every path to it excluded the leaf
    facts = set(found)
    if ENTRY in facts:
        facts.discard(ENTRY)
        facts |= _outer_facts(ctx, scope, key)
    return facts == {LEAF}


def _initial(scope: ast.AST, key: str) -> frozenset[str]:
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        args = scope.args
        names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                                 *([args.vararg] if args.vararg else []), *([args.kwarg] if args.kwarg else [])]}
        if key in names:
            return frozenset({PLAIN})  # a parameter: whatever the caller passes, unknown here
    return frozenset({ENTRY})


def _outer_facts(ctx: FileContext, scope: ast.AST, key: str) -> set[str]:
    """What the name holds before the scope binds it: for ``self.w``, any binding in the class's
    methods; for another name read in a function, any binding at module level."""
    if key.startswith("self."):
        cls = ctx.enclosing_class(scope) if scope is not ctx.tree else None
        binds = []
        if cls is not None:
            for stmt in cls.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    binds.extend(ctx.assignments(stmt).get(key, []))
    elif scope is not ctx.tree and key not in ctx.assignments(scope):
        binds = ctx.assignments(ctx.tree).get(key, [])
    else:
        return set()  # a local name read before any binding: unbound, not a leaf
    return {LEAF if _binds_leaf(ctx, owner, value, key) else PLAIN for owner, value in binds}


def _binds_leaf(ctx: FileContext, owner: ast.AST, value: ast.AST | None, key: str) -> bool:
    return _parameter_loop(ctx, owner, key) or creates_grad_leaf(ctx, value)


def _parameter_loop(ctx: FileContext, owner: ast.AST, key: str) -> bool:
    """``for p in x.parameters()`` binds ``key``; ``p`` is a parameter as surely as ``x`` is a module."""
    if not parameter_loop_binding(ctx, owner, key):
        return False
    note_parameters_of(ctx, owner)
    return True


class _KeyFlow:
    """The facts (LEAF / PLAIN / ENTRY) that reach one write of one name, path by path."""

    def __init__(self, ctx: FileContext, key: str, on_path: set[int]):
        self.ctx = ctx
        self.key = key
        self.on_path = on_path
        self.found: frozenset[str] | None = None

    def run(self, stmts: list[ast.stmt], state: frozenset[str]) -> frozenset[str] | None:
        self._block(stmts, state)
        return self.found

    # ---------------------------------------------------------------- statements
    def _block(self, stmts: Iterable[ast.stmt], state: frozenset[str] | None) -> frozenset[str] | None:
        for stmt in stmts:
            if state is None or self.found is not None:
                return None
            state = self._stmt(stmt, state)
        return state

    def _stmt(self, stmt: ast.stmt, state: frozenset[str]) -> frozenset[str] | None:  # noqa: C901
        here = id(stmt) in self.on_path
        if isinstance(stmt, ast.If):
            when_true, when_false = self._narrow(stmt.test, state)
            if here and self._contains(stmt.test):
                self.found = state
                return None
            a = self._block(stmt.body, when_true)
            b = self._block(stmt.orelse, when_false)
            return _join(a, b)
        if isinstance(stmt, _LOOPS):
            if here and self._contains(stmt.iter if not isinstance(stmt, ast.While) else stmt.test):
                self.found = state
                return None
            head = state | self._bound_in(stmt.body + stmt.orelse)
            if isinstance(stmt, (ast.For, ast.AsyncFor)) and self._binds(stmt.target):
                body_in = frozenset({LEAF if _parameter_loop(self.ctx, stmt, self.key) else PLAIN})
            else:
                body_in = head
            self._block(stmt.body, body_in)
            if self.found is not None:
                return None
            return _join(self._block(stmt.orelse, head), head) if stmt.orelse else head
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                if item.optional_vars is not None and self._binds(item.optional_vars):
                    state = self._bound(item.optional_vars, item, item.context_expr)
            return self._block(stmt.body, state)
        if isinstance(stmt, _TRY):
            if here and not any(id(s) in self.on_path for s in stmt.body):
                # the write is in a handler, the else or the finally: anything the body bound may hold
                state = state | self._bound_in(stmt.body)
                for h in stmt.handlers:
                    self._block(h.body, state)
                if self.found is None:
                    self._block(stmt.orelse, state)
                if self.found is None:
                    self._block(stmt.finalbody, state | self._bound_in(stmt.orelse + [*(
                        s for h in stmt.handlers for s in h.body)]))
                return None
            after = self._block(stmt.body, state)
            if self.found is not None:
                return None
            everything = state | self._bound_in(stmt.body)
            ends = [self._block(h.body, everything) for h in stmt.handlers]
            ends.append(self._block(stmt.orelse, after) if after is not None else None)
            out = _join(*ends)
            return self._block(stmt.finalbody, out) if stmt.finalbody and out is not None else out
        if isinstance(stmt, ast.Match):
            ends = [self._block(case.body, state) for case in stmt.cases]
            return _join(state, *ends)
        if here:
            self.found = state
            return None
        if isinstance(stmt, _EXITS):
            return None
        if isinstance(stmt, _NESTED):
            return state
        if isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                if self._binds(t):
                    state = self._bound(t, stmt, stmt.value)
            return state
        if isinstance(stmt, ast.AnnAssign) and stmt.value is not None and self._binds(stmt.target):
            return self._bound(stmt.target, stmt, stmt.value)
        if isinstance(stmt, ast.Delete) and any(self._binds(t) for t in stmt.targets):
            return frozenset({PLAIN})
        return state

    # ---------------------------------------------------------------- bindings
    def _binds(self, target: ast.AST) -> bool:
        if isinstance(target, (ast.Tuple, ast.List)):
            return any(self._binds(e.value if isinstance(e, ast.Starred) else e) for e in target.elts)
        return name_key(target) == self.key

    def _bound(self, target: ast.AST, owner: ast.AST, value: ast.AST | None) -> frozenset[str]:
        """The fact a binding of ``target`` (which binds the key) leaves, with ``value`` bound to it."""
        if isinstance(target, (ast.Tuple, ast.List)):
            same_length = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
            vals = value.elts if same_length else None
            for i, elt in enumerate(target.elts):
                if isinstance(elt, ast.Starred) or not self._binds(elt):
                    continue
                return self._bound(elt, owner, vals[i] if vals else None)
            return frozenset({PLAIN})
        return frozenset({LEAF if creates_grad_leaf(self.ctx, value) else PLAIN})

    def _bound_in(self, stmts: list[ast.stmt]) -> frozenset[str]:
        """The facts of every binding of the key anywhere in ``stmts`` (not in nested defs)."""
        out: set[str] = set()
        for node in self.ctx.walk_scope(stmts):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if self._binds(t):
                        out |= self._bound(t, node, node.value)
            elif isinstance(node, ast.AnnAssign) and node.value is not None and self._binds(node.target):
                out |= self._bound(node.target, node, node.value)
            elif isinstance(node, (ast.For, ast.AsyncFor)) and self._binds(node.target):
                out.add(LEAF if _parameter_loop(self.ctx, node, self.key) else PLAIN)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None and self._binds(node.optional_vars):
                out |= self._bound(node.optional_vars, node, node.context_expr)
        return frozenset(out)

    def _contains(self, expr: ast.AST | None) -> bool:
        return expr is not None and any(id(n) in self.on_path for n in ast.walk(expr))

    # ---------------------------------------------------------------- narrowing
    def _narrow(self, test: ast.expr, state: frozenset[str]) -> tuple[frozenset[str] | None, frozenset[str] | None]:
        """The states on the true and the false branch of ``test``: where the test says the value is
        no leaf requiring grad, only PLAIN remains."""
        plain = frozenset({PLAIN})
        if self._leaf_when(test, True):
            return state, plain  # true means a leaf, so false means not one
        if self._leaf_when(test, False):
            return plain, state
        return state, state

    def _leaf_when(self, test: ast.expr, outcome: bool) -> bool:
        """Whether ``test`` evaluating to ``not outcome`` proves the key is no leaf requiring grad:
        ``isinstance(k, nn.Parameter)`` / ``k.requires_grad`` (outcome True), their negation (False),
        and ``or`` (``and``) of tests one of which does so."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self._leaf_when(test.operand, not outcome)
        if isinstance(test, ast.BoolOp):
            # `a or b` false means every operand false; `a and b` true means every operand true
            if isinstance(test.op, ast.Or) and outcome:
                return any(self._leaf_when(v, True) for v in test.values)
            if isinstance(test.op, ast.And) and not outcome:
                return any(self._leaf_when(v, False) for v in test.values)
            return False
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.comparators[0], ast.Constant):
            const = test.comparators[0].value
            if isinstance(const, bool) and isinstance(test.ops[0], (ast.Is, ast.Eq, ast.IsNot, ast.NotEq)):
                positive = const == isinstance(test.ops[0], (ast.Is, ast.Eq))
                return self._leaf_when(test.left, outcome if positive else not outcome)
            return False
        if not outcome:
            return False
        if isinstance(test, ast.Attribute) and test.attr == "requires_grad":
            return name_key(test.value) == self.key
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance" \
                and len(test.args) == 2 and name_key(test.args[0]) == self.key:
            classes = test.args[1].elts if isinstance(test.args[1], ast.Tuple) else [test.args[1]]
            return any(self.ctx.resolve(c) in _PARAMETER for c in classes)
        return False


def _join(*states: frozenset[str] | None) -> frozenset[str] | None:
    live = [s for s in states if s is not None]
    if not live:
        return None
    out: frozenset[str] = frozenset()
    for s in live:
        out |= s
    return out
