"""Whether code in an ``nn.Module``'s method runs only while the module is in training mode.

``model.eval()`` sets ``training = False`` on every submodule; code that reads it decides what runs.
A node runs only in training mode when every path to it passes a test that is true only while
``self.training`` is (``self`` being the method's first parameter):

- it sits in the branch of an ``if`` / ``while`` / conditional expression / ``and`` / ``or`` /
  comprehension filter / ``case ... if`` guard that such a test selects (``if self.training and p > 0:``, ``x if not
  self.training else F.dropout(x)``, ``if not self.training: ... else: ...``);
- an earlier statement of an enclosing block leaves it when not training (``if not self.training:
  return x``, ``... continue``, ``raise``, ``assert self.training``);
- it is in a helper (a method other than ``forward``, or a function nested in one) that this file
  only calls from such places (``if self.training: x = self._drop(x)``).

A test speaks of the mode through ``self.training`` itself, ``not``, ``and``, ``or``, ``is`` / ``==``
against ``True`` / ``False``, a local name whose every reaching definition is such a test
(``use_dropout = self.training and self.p > 0``), or a property or method of the class that returns one
(``def _active(self): return self.training and self.p > 0``).
"""

from __future__ import annotations

import ast

from torchpact.lint.analysis.bindings import Bindings
from torchpact.lint.analysis.navigation import FUNCTION_TYPES, Navigation
from torchpact.lint.analysis.following import follows_definitions

_DEPTH = 4  # helpers of helpers: deep enough for real code, bounded for cycles
_BLOCKS = ("body", "orelse", "finalbody")
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


class ModeGuards:
    """The training-mode tests that guard the nodes of one file."""

    def __init__(self, navigation: Navigation, bindings: Bindings):
        self._navigation = navigation
        self._bindings = bindings
        self._memo: dict[tuple[int, int], bool] = {}

    def only_in_training(self, node: ast.AST) -> bool:
        """Whether ``node`` (inside a method of a class) runs only while ``self.training`` is True."""
        return self._guarded(node, _DEPTH)

    def implies(self, test: ast.AST, truth: bool, node: ast.AST) -> bool:
        """Whether ``test`` having the truth value ``truth`` means ``self.training`` is True, ``self``
        being the first parameter of the method around ``node``."""
        method = self._method(node)
        if method is None:
            return False
        return self._implies(test, truth, _self_name(method), self._class(method), _DEPTH)

    # ------------------------------------------------------------------ paths to a node
    def _guarded(self, node: ast.AST, depth: int) -> bool:
        key = (id(node), depth)
        if key not in self._memo:
            self._memo[key] = False  # a helper that calls itself proves nothing about itself
            self._memo[key] = self._walk(node, depth)
        return self._memo[key]

    def _walk(self, node: ast.AST, depth: int) -> bool:
        method = self._method(node)
        if method is None:
            return False
        me, cls = _self_name(method), self._class(method)
        child = node
        for anc in self._navigation.ancestors(node):
            if self._selects(anc, child, me, cls, depth):
                return True
            for field in _BLOCKS:
                block = getattr(anc, field, None)
                if isinstance(block, list) and child in block:
                    if any(self._leaves_unless_training(s, me, cls, depth) for s in block[: block.index(child)]):
                        return True
            if isinstance(anc, ast.Lambda):
                return False  # runs when called, wherever that is
            if isinstance(anc, FUNCTION_TYPES):
                return depth > 0 and self._helper_called_only_in_training(anc, cls, depth - 1)
            child = anc
        return False

    def _selects(self, anc: ast.AST, child: ast.AST, me: str | None, cls: ast.ClassDef | None, depth: int) -> bool:
        """Whether the branch of ``anc`` that holds ``child`` is taken only in training mode."""
        if isinstance(anc, (ast.If, ast.While)) and child is not anc.test:
            if child in anc.body:
                return self._implies(anc.test, True, me, cls, depth)
            return isinstance(anc, ast.If) and self._implies(anc.test, False, me, cls, depth)
        if isinstance(anc, ast.IfExp) and child is not anc.test:
            return self._implies(anc.test, child is anc.body, me, cls, depth)
        if isinstance(anc, ast.BoolOp) and child is not anc.values[0]:
            before = anc.values[: anc.values.index(child)]  # type: ignore[arg-type]
            # ``a and b``: b runs only when a is true; ``a or b``: only when a is false
            truth = isinstance(anc.op, ast.And)
            return any(self._implies(v, truth, me, cls, depth) for v in before)
        if isinstance(anc, ast.match_case) and child in anc.body and anc.guard is not None:
            return self._implies(anc.guard, True, me, cls, depth)
        if isinstance(anc, _COMPREHENSIONS) and not isinstance(child, ast.comprehension):
            return any(self._implies(c, True, me, cls, depth) for g in anc.generators for c in g.ifs)
        return False

    def _leaves_unless_training(self, stmt: ast.stmt, me: str | None, cls: ast.ClassDef | None, depth: int) -> bool:
        """A statement after which the block goes on only in training mode."""
        if isinstance(stmt, ast.Assert):
            return self._implies(stmt.test, True, me, cls, depth)
        if isinstance(stmt, ast.If):
            if _leaves(stmt.body) and self._implies(stmt.test, False, me, cls, depth):
                return True
            return _leaves(stmt.orelse) and self._implies(stmt.test, True, me, cls, depth)
        return False

    def _helper_called_only_in_training(self, fn: ast.AST, cls: ast.ClassDef | None, depth: int) -> bool:
        """A method other than ``forward`` (or a function nested in one) that is only ever called, and
        called at least once, from places that run only in training mode."""
        assert isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        owner = self._navigation.parent(fn)
        refs: list[ast.AST]
        if isinstance(owner, ast.ClassDef):
            if fn.name in ("forward", "__call__") or fn.decorator_list and not _static(fn):
                return False  # what torch or a decorator calls, the analysis does not see
            refs = [n for n in self._navigation.nodes(ast.Attribute)
                    if isinstance(n, ast.Attribute) and n.attr == fn.name]
        else:
            scope = self._navigation.scope(fn)
            refs = [n for n in self._navigation.walk_scope_once(scope)
                    if isinstance(n, ast.Name) and n.id == fn.name and isinstance(n.ctx, ast.Load)]
        calls = [self._navigation.parent(r) for r in refs]
        if not calls or any(not (isinstance(c, ast.Call) and c.func is r) for c, r in zip(calls, refs, strict=True)):
            return False  # passed around or stored: called from where the analysis cannot see
        return all(c is not None and self._guarded(c, depth) for c in calls)

    # ------------------------------------------------------------------ tests of the mode
    @follows_definitions(False)
    def _implies(self, test: ast.AST, truth: bool, me: str | None, cls: ast.ClassDef | None, depth: int) -> bool:
        if _is_mode(test, me):
            return truth
        if isinstance(test, ast.Constant):
            return bool(test.value) != truth  # a value the test never has: says nothing against it
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self._implies(test.operand, not truth, me, cls, depth)
        if isinstance(test, ast.BoolOp):
            # a true ``and`` / a false ``or``: every operand has that value; otherwise only some does
            every = isinstance(test.op, ast.And) == truth
            parts = (self._implies(v, truth, me, cls, depth) for v in test.values)
            return any(parts) if every else all(parts)
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and _is_mode(test.left, me):
            value = test.comparators[0]
            if isinstance(value, ast.Constant) and isinstance(value.value, bool):
                positive = isinstance(test.ops[0], (ast.Is, ast.Eq))
                if positive or isinstance(test.ops[0], (ast.IsNot, ast.NotEq)):
                    return truth == (value.value == positive)
            return False
        if depth <= 0:
            return False
        if isinstance(test, ast.Name):
            values = [v for _, v in self._bindings.bindings(test)]
            return bool(values) and all(
                v is not None and self._implies(v, truth, me, cls, depth - 1) for v in values)
        returned, own = self._returned(test, me, cls)
        return bool(returned) and all(self._implies(r, truth, own, cls, depth - 1) for r in returned)

    def _returned(self, test: ast.AST, me: str | None,
                  cls: ast.ClassDef | None) -> tuple[list[ast.AST], str | None]:
        """What ``self.prop`` (a property) or ``self.method()`` returns on every path, with that
        method's own name for ``self``; [] when unknown."""
        call = isinstance(test, ast.Call) and not test.args and not test.keywords
        target = test.func if isinstance(test, ast.Call) and call else test
        if cls is None or not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                               and target.value.id == me):
            return [], None
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == target.attr:
                if call == any(_decorator_name(d) == "property" for d in stmt.decorator_list):
                    return [], None  # a property called, or a method read without a call
                return _returns(stmt), _self_name(stmt)
        return [], None

    # ------------------------------------------------------------------ where a node is
    def _method(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The method of a class around ``node`` (outside the nested functions it may hold)."""
        found = None
        for anc in self._navigation.ancestors(node):
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found = anc
            elif isinstance(anc, ast.ClassDef):
                return found
        return None

    def _class(self, method: ast.AST) -> ast.ClassDef | None:
        owner = self._navigation.parent(method)
        return owner if isinstance(owner, ast.ClassDef) else None


def _is_mode(expr: ast.AST, me: str | None) -> bool:
    """``self.training``, ``self`` being the method's first parameter."""
    return (me is not None and isinstance(expr, ast.Attribute) and expr.attr == "training"
            and isinstance(expr.value, ast.Name) and expr.value.id == me)


def _self_name(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    if _static(fn) or not fn.args.args and not fn.args.posonlyargs:
        return None
    return (fn.args.posonlyargs or fn.args.args)[0].arg


def _static(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(_decorator_name(d) in ("staticmethod", "classmethod") for d in fn.decorator_list)


def _decorator_name(d: ast.AST) -> str | None:
    return d.id if isinstance(d, ast.Name) else d.attr if isinstance(d, ast.Attribute) else None


def _returns(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    """The values a function returns when its body is returns only at its end or in ``if`` branches
    that all return; [] when some path falls off the end or returns nothing."""
    values: list[ast.AST] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Return):
            if node.value is None:
                return []
            values.append(node.value)
        elif isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)) and node is not fn:
            return []  # nested definitions: their returns are not this function's
    return values if fn.body and isinstance(fn.body[-1], ast.Return) else []


def _leaves(block: list[ast.stmt]) -> bool:
    """A block that always leaves the enclosing one: it ends in return / raise / continue / break."""
    return bool(block) and isinstance(block[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))
