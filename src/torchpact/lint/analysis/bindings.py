"""Where a name (or ``obj.attr``) is bound, and the values it may hold.

A plain name's definitions are those that reach its read (lint/dataflow.py); attributes, and names a
scope never binds, stay flow-insensitive: every binding in the scope, then the class's methods
(``self.x``), then the module.
"""

from __future__ import annotations

import ast

from torchpact.lint.analysis.budget import Budget
from torchpact.lint.analysis.navigation import FUNCTION_TYPES, Navigation
from torchpact.lint.dataflow import ScopeFlow, _Iterated, _Unpacked

_BINDERS = frozenset({ast.Assign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.withitem, ast.NamedExpr})
Binding = tuple[ast.AST, ast.AST | None]  # (binding node, value or None)


class Bindings:
    """Assignments and reaching definitions of the scopes of one file, built once per scope."""

    def __init__(self, navigation: Navigation, budget: Budget):
        self._navigation = navigation
        self._budget = budget
        self._assign_cache: dict[int, dict[str, list[Binding]]] = {}
        self._flows: dict[int, ScopeFlow] = {}

    def assignments(self, scope: ast.AST) -> dict[str, list[Binding]]:
        """Name -> [(binding node, value or None)] for every binding in ``scope`` (not nested ones)."""
        key = id(scope)
        cached = self._assign_cache.get(key)
        if cached is not None:
            return cached
        table: dict[str, list[Binding]] = {}

        def bind(target: ast.AST, owner: ast.AST, value: ast.AST | None) -> None:
            if isinstance(target, ast.Name):
                table.setdefault(target.id, []).append((owner, value))
            elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                table.setdefault(f"{target.value.id}.{target.attr}", []).append((owner, value))
            elif isinstance(target, (ast.Tuple, ast.List)):
                elts = target.elts
                vals = value.elts if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(elts) else None
                for i, elt in enumerate(elts):
                    if isinstance(elt, ast.Starred):
                        elt = elt.value
                    bind(elt, owner, vals[i] if vals else _Unpacked(value) if value is not None else None)

        body: ast.AST | list[ast.stmt]
        if isinstance(scope, FUNCTION_TYPES):
            args = scope.args
            for a in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                      *([args.vararg] if args.vararg else []), *([args.kwarg] if args.kwarg else [])]:
                table.setdefault(a.arg, []).append((a, None))
            body = scope.body if isinstance(scope.body, list) else [scope.body]  # type: ignore[list-item]
        else:
            body = scope.body  # type: ignore[attr-defined]
        for node in self._navigation.walk_scope_once(body):
            if type(node) not in _BINDERS:
                continue  # most nodes: one set lookup instead of five isinstance tests
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    bind(t, node, node.value)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                bind(node.target, node, node.value)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                bind(node.target, node, _Iterated(node.iter))
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                bind(node.optional_vars, node, node.context_expr)
            elif isinstance(node, ast.NamedExpr):
                bind(node.target, node, node.value)
        self._assign_cache[key] = table
        return table

    def flow(self, scope: ast.AST) -> ScopeFlow:
        """Reaching definitions of the plain names of ``scope`` (built once per scope)."""
        flow = self._flows.get(id(scope))
        if flow is None:
            self._budget.tick()
            flow = self._flows[id(scope)] = ScopeFlow(scope)
        return flow

    def bindings(self, expr: ast.AST) -> list[Binding]:
        """Where the name (or ``obj.attr``) in ``expr`` is bound.

        A plain name read in a function or the module gets the definitions that reach that read
        (flow-sensitive); a name the scope never binds, and ``obj.attr``, get every binding in the
        scope, then the class's methods (``self.x``), then the module.
        """
        nav = self._navigation
        if isinstance(expr, ast.Name):
            key = expr.id
            scope = nav.scope(expr)
            flow = self.flow(scope)
            reaching = flow.reaching(expr)
            if reaching is not None and (reaching or key in flow.local_names):
                return reaching
        elif isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            key = f"{expr.value.id}.{expr.attr}"
        else:
            return []
        scope = nav.scope(expr)
        found = self.assignments(scope).get(key, [])
        if not found and key.startswith("self.") and (cls := nav.enclosing_class(expr)) is not None:
            found = []
            for stmt in cls.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.extend(self.assignments(stmt).get(key, []))
        if not found and scope is not nav.tree:
            found = self.assignments(nav.tree).get(key, [])
        return found

    def values(self, expr: ast.AST) -> list[ast.AST]:
        """The expression itself, or the values assigned to the name it is."""
        if isinstance(expr, (ast.Name, ast.Attribute)):
            vals = [v for _, v in self.bindings(expr) if v is not None]
            if vals:
                return vals
        return [expr]
