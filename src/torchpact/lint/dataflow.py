"""Reaching definitions for one scope: which bindings of a name reach each place it is read.

One forward pass over a function's (or the module's) statements, structured rather than through an
explicit control-flow graph: ``if`` joins its branches, a loop body is re-run until the set of
definitions at its head holds what reaches it from before plus every binding made inside the loop, and
``break``/``continue``/``return``/``raise`` end a path. Every statement is visited once (a loop's
bindings are collected once, nested loops included), so the cost is linear in the scope's size
(``tests/test_dataflow.py`` checks it on generated worst cases), and a self-referential rebinding
such as ``model = model.to(rank)`` is an edge from one definition to the previous one, not a cycle.

A definition is ``(owner, value)``: the binding statement (or argument) and the expression bound,
``None`` when unknown (a parameter, an import, a ``def``). Only plain names are tracked; attributes
(``self.model``) stay flow-insensitive in :class:`~torchpact.lint.context.FileContext`.
"""

from __future__ import annotations

import ast
from typing import Callable, Iterable

Definition = tuple[ast.AST, "ast.AST | None"]
# name -> the definitions that may hold when control is here
State = dict[str, frozenset[int]]

LOOPS = (ast.For, ast.AsyncFor, ast.While)
_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class ScopeFlow:
    """Reaching definitions of the plain names of one scope (function, lambda or module).

    ``reaching(name_node)`` answers for a ``Name`` read in this scope; ``rebound_in(name, loop)``
    whether a name is bound anywhere in a loop's body.
    """

    def __init__(self, scope: ast.AST):
        self.scope = scope
        self.visits = 0  # statements processed, all passes together: the cost the tests bound
        self.defs: list[Definition] = []
        self._def_ids: dict[tuple[int, str, int], int] = {}
        self._reach: dict[int, frozenset[int]] = {}
        self.local_names: set[str] = set()
        self._loops: list[tuple[list[State], list[State]]] = []  # (breaks, continues) per open loop
        self._loop_cache: dict[int, dict[str, frozenset[int]]] = {}
        self._elements: dict[int, _Iterated] = {}
        state: State = {}
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = scope.args
            for a in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                      *([args.vararg] if args.vararg else []), *([args.kwarg] if args.kwarg else [])]:
                self._define(state, a.arg, a, None, 0)
            body: list[ast.stmt] = scope.body if isinstance(scope.body, list) else [ast.Expr(scope.body)]
        else:
            body = getattr(scope, "body", [])
        self._block(body, state)

    # ------------------------------------------------------------------ queries
    def reaching(self, name: ast.Name) -> list[Definition] | None:
        """Definitions that may be what ``name`` holds where it is read; None when not recorded."""
        ids = self._reach.get(id(name))
        if ids is None:
            return None
        return [self.defs[i] for i in sorted(ids)]

    # ------------------------------------------------------------------ building
    def _define(self, state: State | None, name: str, owner: ast.AST, value: ast.AST | None, slot: int) -> int:
        key = (id(owner), name, slot)
        i = self._def_ids.get(key)
        if i is None:
            i = len(self.defs)
            self._def_ids[key] = i
            self.defs.append((owner, value))
        self.local_names.add(name)
        if state is not None:
            state[name] = frozenset((i,))
        return i

    def _bind_target(self, state: State | None, target: ast.AST, owner: ast.AST, value: ast.AST | None) -> None:
        for slot, (name, val) in enumerate(bound_names(target, value)):
            self._define(state, name, owner, val, slot)

    def _uses(self, expr: ast.AST | None, state: State | None) -> None:
        """Record what reaches every name read in ``expr`` (in evaluation order, roughly)."""
        if expr is None or state is None:
            return
        stack = [expr]
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Name):
                if isinstance(node.ctx, ast.Load):
                    self._reach[id(node)] = self._reach.get(id(node), frozenset()) | state.get(node.id, frozenset())
                continue
            if isinstance(node, _NESTED):
                # a default value or decorator is evaluated here; the body is another scope
                if isinstance(node, ast.Lambda):
                    stack.extend(node.args.defaults + [d for d in node.args.kw_defaults if d is not None])
                continue
            if isinstance(node, ast.NamedExpr):
                self._uses(node.value, state)
                self._bind_target(state, node.target, node, node.value)
                continue
            if isinstance(node, _COMPREHENSIONS):
                inner = dict(state)
                for gen in node.generators:
                    self._uses(gen.iter, inner)
                    self._bind_target(inner, gen.target, node, _Iterated(gen.iter))
                    for cond in gen.ifs:
                        self._uses(cond, inner)
                for part in (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,):
                    self._uses(part, inner)
                continue
            stack.extend(ast.iter_child_nodes(node))

    @staticmethod
    def _join(states: Iterable[State | None]) -> State | None:
        live = [s for s in states if s is not None]
        if not live:
            return None
        if len(live) == 1:
            return dict(live[0])
        out: State = dict(live[0])
        for s in live[1:]:
            for k, v in s.items():
                cur = out.get(k)
                out[k] = v if cur is None else cur | v
        return out

    def _block(self, stmts: list[ast.stmt], state: State | None) -> State | None:
        for stmt in stmts:
            if state is None:
                return None  # unreachable code after return/raise/break/continue
            state = self._stmt(stmt, state)
        return state

    def _stmt(self, stmt: ast.stmt, state: State) -> State | None:
        """The definitions that hold after ``stmt`` (None: no path goes on past it)."""
        self.visits += 1
        return _STATEMENTS.get(type(stmt), ScopeFlow._expressions)(self, stmt, state)

    # One method per statement type (``_STATEMENTS`` below maps each type to its own); each takes the
    # state before the statement, which it may update in place, and returns the state after it.
    def _assign(self, stmt: ast.Assign, state: State) -> State | None:
        self._uses(stmt.value, state)
        for t in stmt.targets:
            self._target_uses(t, state)
            self._bind_target(state, t, stmt, stmt.value)
        return state

    def _ann_assign(self, stmt: ast.AnnAssign, state: State) -> State | None:
        self._uses(stmt.value, state)
        self._target_uses(stmt.target, state)
        if stmt.value is not None or isinstance(stmt.target, ast.Name):
            self._bind_target(state if stmt.value is not None else None, stmt.target, stmt, stmt.value)
        return state

    def _aug_assign(self, stmt: ast.AugAssign, state: State) -> State | None:
        # ``total += loss`` reads and keeps the old value: it is not a reset, and not a new source
        self._uses(stmt.value, state)
        if isinstance(stmt.target, ast.Name):
            key = id(stmt.target)
            self._reach[key] = self._reach.get(key, frozenset()) | state.get(stmt.target.id, frozenset())
        else:
            self._uses(stmt.target, state)
        return state

    def _for(self, stmt: ast.For | ast.AsyncFor, state: State) -> State | None:
        self._uses(stmt.iter, state)
        element = self._element(stmt)
        return self._loop(stmt, state, lambda s: self._bind_target(s, stmt.target, stmt, element))

    def _while(self, stmt: ast.While, state: State) -> State | None:
        self._uses(stmt.test, state)
        return self._loop(stmt, state, lambda s: self._uses(stmt.test, s))

    def _if(self, stmt: ast.If, state: State) -> State | None:
        self._uses(stmt.test, state)
        a = self._block(stmt.body, dict(state))
        b = self._block(stmt.orelse, dict(state))
        return self._join([a, b])

    def _with(self, stmt: ast.With | ast.AsyncWith, state: State) -> State | None:
        for item in stmt.items:
            self._uses(item.context_expr, state)
            if item.optional_vars is not None:
                self._bind_target(state, item.optional_vars, item, item.context_expr)
        return self._block(stmt.body, state)

    def _try(self, stmt: ast.Try, state: State) -> State | None:
        before = dict(state)
        after_body = self._block(stmt.body, dict(state))
        # a handler may start anywhere in the body: what held before it or after it
        entry = self._join([before, after_body])
        ends = []
        for h in stmt.handlers:
            hs = dict(entry) if entry is not None else dict(before)
            self._uses(h.type, hs)
            if h.name:
                self._define(hs, h.name, h, None, 0)
            ends.append(self._block(h.body, hs))
        ends.append(self._block(stmt.orelse, after_body) if after_body is not None else None)
        out = self._join(ends)
        if stmt.finalbody:
            fin = self._block(stmt.finalbody, out if out is not None else dict(entry or before))
            return fin if out is not None else None
        return out

    def _definition(self, stmt: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef,
                    state: State) -> State | None:
        for d in stmt.decorator_list:
            self._uses(d, state)
        if not isinstance(stmt, ast.ClassDef):
            for d in [*stmt.args.defaults, *[k for k in stmt.args.kw_defaults if k is not None]]:
                self._uses(d, state)
        else:
            for b in stmt.bases:
                self._uses(b, state)
        self._define(state, stmt.name, stmt, None, 0)
        return state

    def _import(self, stmt: ast.Import | ast.ImportFrom, state: State) -> State | None:
        for a in stmt.names:
            name = a.asname or a.name.split(".")[0]
            if name != "*":
                self._define(state, name, stmt, None, 0)
        return state

    def _delete(self, stmt: ast.Delete, state: State) -> State | None:
        for t in stmt.targets:
            if isinstance(t, ast.Name):
                state.pop(t.id, None)
            else:
                self._uses(t, state)
        return state

    def _exit(self, stmt: ast.Return | ast.Raise, state: State) -> State | None:
        for child in ast.iter_child_nodes(stmt):
            self._uses(child, state)
        return None

    def _break(self, stmt: ast.Break, state: State) -> State | None:
        if self._loops:
            self._loops[-1][0].append(dict(state))
        return None

    def _continue(self, stmt: ast.Continue, state: State) -> State | None:
        if self._loops:
            self._loops[-1][1].append(dict(state))
        return None

    def _match(self, stmt: ast.Match, state: State) -> State | None:
        self._uses(stmt.subject, state)
        ends = []
        for case in stmt.cases:
            cs = dict(state)
            for node in ast.walk(case.pattern):
                name = getattr(node, "name", None)
                if isinstance(name, str):
                    self._define(cs, name, node, None, 0)
            self._uses(case.guard, cs)
            ends.append(self._block(case.body, cs))
        ends.append(state)
        return self._join(ends)

    def _expressions(self, stmt: ast.stmt, state: State) -> State | None:
        """Any other statement (an expression, ``assert``, ``global``, ``pass``...): it only reads."""
        for child in ast.iter_child_nodes(stmt):
            self._uses(child, state)
        return state

    def _target_uses(self, target: ast.AST, state: State) -> None:
        """Names read by a store target: ``a[i] = v`` reads ``a`` and ``i``; ``a.b = v`` reads ``a``."""
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            self._uses(target, state)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._target_uses(elt.value if isinstance(elt, ast.Starred) else elt, state)

    def _loop(self, loop: ast.For | ast.AsyncFor | ast.While, state: State,
              head: Callable[[State], None]) -> State | None:
        # Every binding inside the loop may be what the next iteration starts with, so the head
        # holds the entry's definitions plus all of the loop's own: one pass over the body, no
        # fixpoint, hence no cost that multiplies with the nesting depth.
        head_state = dict(state)
        for name, ids in self._loop_defs(loop).items():
            cur = head_state.get(name)
            head_state[name] = ids if cur is None else cur | ids
        body_in = dict(head_state)
        head(body_in)
        self._loops.append(([], []))
        self._block(loop.body, body_in)
        breaks, _ = self._loops.pop()
        # the loop ends when its test fails at the head (or the iterable runs out), or on a break
        tail = self._block(loop.orelse, dict(head_state)) if loop.orelse else head_state
        return self._join([tail, *breaks])

    def _loop_defs(self, loop: ast.AST) -> dict[str, frozenset[int]]:
        """name -> the definitions made anywhere in ``loop`` (its target included); memoised, so
        nested loops cost one walk in all."""
        cached = self._loop_cache.get(id(loop))
        if cached is not None:
            return cached
        found: dict[str, set[int]] = {}

        def add(name: str, owner: ast.AST, value: ast.AST | None, slot: int) -> None:
            found.setdefault(name, set()).add(self._define(None, name, owner, value, slot))

        def add_target(target: ast.AST, owner: ast.AST, value: ast.AST | None) -> None:
            for slot, (name, val) in enumerate(bound_names(target, value)):
                add(name, owner, val, slot)

        if isinstance(loop, (ast.For, ast.AsyncFor)):
            add_target(loop.target, loop, self._element(loop))
        stack: list[ast.AST] = [*loop.body, *loop.orelse] if isinstance(loop, (ast.For, ast.AsyncFor)) else (
            [loop.test, *loop.body, *loop.orelse] if isinstance(loop, ast.While) else [])
        while stack:
            node = stack.pop()
            if isinstance(node, LOOPS) and node is not loop:
                for name, ids in self._loop_defs(node).items():
                    found.setdefault(name, set()).update(ids)
                if isinstance(node, (ast.For, ast.AsyncFor)):
                    stack.append(node.iter)
                else:
                    stack.append(node.test)
                continue
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    add_target(t, node, node.value)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                add_target(node.target, node, node.value)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                add_target(node.optional_vars, node, node.context_expr)
            elif isinstance(node, ast.NamedExpr):
                add_target(node.target, node, node.value)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    if a.name != "*":
                        add(a.asname or a.name.split(".")[0], node, None, 0)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                add(node.name, node, None, 0)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                add(node.name, node, None, 0)
                continue
            if isinstance(node, (ast.Lambda, *_COMPREHENSIONS)):
                continue  # their names are their own
            stack.extend(ast.iter_child_nodes(node))
        out = {k: frozenset(v) for k, v in found.items()}
        self._loop_cache[id(loop)] = out
        return out

    def _element(self, loop: ast.For | ast.AsyncFor) -> ast.AST:
        element = self._elements.get(id(loop))
        if element is None:
            element = self._elements[id(loop)] = _Iterated(loop.iter)
        return element


def bound_names(target: ast.AST, value: ast.AST | None) -> list[tuple[str, ast.AST | None]]:
    """(name, value) for each plain name a store target binds; ``a, b = x, y`` pairs them up."""
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if isinstance(target, ast.Starred):
        return bound_names(target.value, _Unpacked(value) if value is not None else None)
    if isinstance(target, (ast.Tuple, ast.List)):
        elts = target.elts
        vals = value.elts if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(elts) else None
        out = []
        for i, elt in enumerate(elts):
            if isinstance(elt, ast.Starred):
                elt = elt.value
            out.extend(bound_names(elt, vals[i] if vals else _Unpacked(value) if value is not None else None))
        return out
    return []



# The statement types ``ScopeFlow._stmt`` dispatches on; every other statement only reads.
_STATEMENTS: dict[type, Callable[..., State | None]] = {
    ast.Assign: ScopeFlow._assign, ast.AnnAssign: ScopeFlow._ann_assign, ast.AugAssign: ScopeFlow._aug_assign,
    ast.For: ScopeFlow._for, ast.AsyncFor: ScopeFlow._for, ast.While: ScopeFlow._while, ast.If: ScopeFlow._if,
    ast.With: ScopeFlow._with, ast.AsyncWith: ScopeFlow._with, ast.Try: ScopeFlow._try,
    ast.FunctionDef: ScopeFlow._definition, ast.AsyncFunctionDef: ScopeFlow._definition,
    ast.ClassDef: ScopeFlow._definition, ast.Import: ScopeFlow._import, ast.ImportFrom: ScopeFlow._import,
    ast.Delete: ScopeFlow._delete, ast.Return: ScopeFlow._exit, ast.Raise: ScopeFlow._exit,
    ast.Break: ScopeFlow._break, ast.Continue: ScopeFlow._continue, ast.Match: ScopeFlow._match,
}
if hasattr(ast, "TryStar"):  # Python 3.11+: ``except*``
    _STATEMENTS[ast.TryStar] = ScopeFlow._try

class _Iterated(ast.AST):
    """Stands for 'an element of this iterable' as the value bound by a for loop."""

    _fields = ()

    def __init__(self, iterable: ast.AST):
        super().__init__()
        self.iterable = iterable


class _Unpacked(ast.AST):
    """Stands for 'one element of this value' in tuple unpacking."""

    _fields = ()

    def __init__(self, value: ast.AST):
        super().__init__()
        self.value = value
