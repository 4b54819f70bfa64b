"""What a ``train()`` override would change about a module's training state, read from its source.

The override's source (``ast``) is walked with the module at hand, a few calls deep: the methods it calls on
``self``, the functions it names (``self.apply(set_bn_eval)``, ``map(fn, ...)``, a plain call) and the
lambdas it holds. A change is a ``.eval()``, a ``.train(x)`` whose mode is not the override's own ``mode``
passed on, a ``requires_grad_(...)`` or an assignment to ``.requires_grad`` (kinds ``"eval"`` and
``"requires_grad"``), or a call whose name says it freezes (``_freeze_stages()``) when its source cannot be
read (kind ``"freeze"``). Branch tests and loop ranges that only read plain attributes of the module, the
override's ``mode`` and constants (``if self.frozen_stages >= 0``, ``if mode and self.norm_eval``,
``for i in range(1, self.frozen_stages + 1)``) are evaluated, so an override whose set-up is switched off
by the module's configuration (mmpretrain's defaults: ``frozen_stages=-1``, ``norm_eval=False``) changes
nothing. Whatever cannot be evaluated counts as possibly running. Nothing is executed: properties are not
read, no function is called.
"""

from __future__ import annotations

import ast
import functools
import inspect
import operator
import textwrap
from typing import Any

DEPTH = 3   # calls followed from the override (train -> _freeze -> _freeze_bn -> m.eval())
UNKNOWN = object()

_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
            ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


@functools.lru_cache(maxsize=256)
def _function_node(func: Any) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | None:
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a lambda's source is the line around it: its node is in its parent's tree anyway
        return None
    return next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)


def is_torch(func: Any) -> bool:
    module = getattr(func, "__module__", None) or ""
    return module == "torch" or module.startswith("torch.")


def changes(func: Any, module: Any) -> set[str] | None:
    """The kinds of training-state change ``func`` (a ``train`` override) would make on ``module`` if it ran
    with ``mode=True``; None when its source cannot be read."""
    node = _function_node(func)
    if node is None:
        return None
    params = node.args.args
    env = {params[0].arg: module} if params else {}
    if len(params) > 1:
        env[params[1].arg] = True
    return _Walk(type(module), module).function(func, node, env, 0)


class _Walk:
    def __init__(self, cls: type, module: Any) -> None:
        self.cls = cls
        self.module = module
        self.seen: set[Any] = set()

    def function(self, func: Any, node: Any, env: dict[str, Any], depth: int) -> set[str]:
        self.seen.add(func)
        kinds: set[str] = set()
        callees: list[tuple[Any, bool]] = []
        self._body(node.body, env, kinds, callees, self._scope(func))
        if depth < DEPTH:
            for callee, bound in callees:
                if callee in self.seen:
                    continue
                callee_node = _function_node(callee)
                if callee_node is None:
                    continue
                callee_params = callee_node.args.args
                callee_env = {callee_params[0].arg: self.module} if bound and callee_params else {}
                kinds |= self.function(callee, callee_node, callee_env, depth + 1)
        return kinds

    @staticmethod
    def _scope(func: Any) -> dict[str, Any]:
        scope = dict(getattr(func, "__globals__", {}))
        cells = getattr(func, "__closure__", None) or ()
        freevars = getattr(getattr(func, "__code__", None), "co_freevars", ())
        for name, cell in zip(freevars, cells, strict=False):
            try:
                scope[name] = cell.cell_contents
            except ValueError:  # an empty cell
                pass
        return scope

    def _body(self, stmts: list[ast.stmt], env: dict, kinds: set[str], callees: list, scope: dict) -> None:
        for stmt in stmts:
            if isinstance(stmt, ast.If):
                self._expr(stmt.test, env, kinds, callees, scope)
                taken = _evaluate(stmt.test, env)
                if taken is UNKNOWN or taken:
                    self._body(stmt.body, env, kinds, callees, scope)
                if taken is UNKNOWN or not taken:
                    self._body(stmt.orelse, env, kinds, callees, scope)
            elif isinstance(stmt, (ast.For, ast.AsyncFor)):
                self._expr(stmt.iter, env, kinds, callees, scope)
                items = _evaluate(stmt.iter, env)
                if items is UNKNOWN or _nonempty(items):
                    self._body(stmt.body, {k: v for k, v in env.items() if k not in _names(stmt.target)},
                               kinds, callees, scope)
                self._body(stmt.orelse, env, kinds, callees, scope)
            elif isinstance(stmt, (ast.While, ast.With, ast.AsyncWith, ast.Try)):
                for field in ("test", "items"):
                    for part in (getattr(stmt, field, None),) if field == "test" else getattr(stmt, field, ()):
                        if part is not None:
                            self._expr(part, env, kinds, callees, scope)
                for block in ("body", "orelse", "finalbody"):
                    self._body(getattr(stmt, block, []) or [], env, kinds, callees, scope)
                for handler in getattr(stmt, "handlers", []):
                    self._body(handler.body, env, kinds, callees, scope)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue  # a nested definition runs only when called
            else:
                self._expr(stmt, env, kinds, callees, scope)

    def _expr(self, node: ast.AST, env: dict, kinds: set[str], callees: list, scope: dict) -> None:
        owner = next(iter(k for k, v in env.items() if v is self.module), None)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
                kinds |= _change_of_call(sub)
            elif isinstance(sub, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                if any(isinstance(t, ast.Attribute) and t.attr == "requires_grad" for t in targets):
                    kinds.add("requires_grad")
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in env:
                self._callee(sub.id, scope.get(sub.id), False, kinds, callees)
            elif (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and owner is not None
                  and sub.value.id == owner):
                target = inspect.getattr_static(self.cls, sub.attr, None)
                bound = not isinstance(target, staticmethod)
                if isinstance(target, (staticmethod, classmethod)):
                    target = target.__func__
                self._callee(sub.attr, target, bound, kinds, callees)

    @staticmethod
    def _callee(name: str, target: Any, bound: bool, kinds: set[str], callees: list) -> None:
        if inspect.isfunction(target) and not is_torch(target):
            callees.append((target, bound))
        elif target is None and "freeze" in name.lower():
            kinds.add("freeze")  # a freezing helper whose code cannot be read


def _change_of_call(call: ast.Call) -> set[str]:
    attr, target = call.func.attr, call.func.value
    if isinstance(target, ast.Call) and isinstance(target.func, ast.Name) and target.func.id == "super":
        return set()  # super().train(mode): what nn.Module.train does anyway
    if attr == "eval" and not call.args:
        return {"eval"}
    if attr == "train":
        # train(mode) / train(training) passes a mode on; train(False), train(not x), train(mode and y) set one
        given = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "mode"), None)
        passed_on = given is None or isinstance(given, ast.Name) or (
            isinstance(given, ast.Constant) and given.value is True)
        return set() if passed_on else {"eval"}
    if attr == "requires_grad_":
        return {"requires_grad"}
    return set()


def _names(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _nonempty(items: Any) -> bool:
    try:
        return len(items) > 0
    except TypeError:
        return True


def _attribute(value: Any, name: str) -> Any:
    """A plain attribute of ``value`` (a module's config, its sub-module), never a property or a method."""
    try:
        found = inspect.getattr_static(value, name)
    except AttributeError:
        modules = getattr(value, "__dict__", {}).get("_modules") or {}
        return modules.get(name, UNKNOWN)
    if isinstance(found, (bool, int, float, str, tuple, type(None))):
        return found
    if hasattr(found, "__get__") or callable(found):
        return UNKNOWN
    return found


def _evaluate(node: ast.AST, env: dict[str, Any]) -> Any:
    """The value of a simple expression over ``env``, or UNKNOWN."""
    try:
        return _value(node, env)
    except Exception:
        return UNKNOWN


def _value(node: ast.AST, env: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id, UNKNOWN)
    if isinstance(node, ast.Attribute):
        base = _value(node.value, env)
        return UNKNOWN if base is UNKNOWN else _attribute(base, node.attr)
    if isinstance(node, ast.UnaryOp):
        operand = _value(node.operand, env)
        if operand is UNKNOWN:
            return UNKNOWN
        if isinstance(node.op, ast.Not):
            return not operand
        if isinstance(node.op, ast.USub):
            return -operand
        return UNKNOWN
    if isinstance(node, ast.BoolOp):
        values = [_value(v, env) for v in node.values]
        is_and = isinstance(node.op, ast.And)
        for v in values:  # a decisive operand settles it even next to unknown ones
            if v is not UNKNOWN and bool(v) is not is_and:
                return v
        return UNKNOWN if any(v is UNKNOWN for v in values) else values[-1]
    if isinstance(node, ast.Compare):
        left = _value(node.left, env)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _value(right_node, env)
            if left is UNKNOWN or right is UNKNOWN or type(op) not in _COMPARE:
                return UNKNOWN
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _value(node.left, env), _value(node.right, env)
        if left is UNKNOWN or right is UNKNOWN:
            return UNKNOWN
        return _ARITHMETIC[type(node.op)](left, right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("range", "len"):
        args = [_value(a, env) for a in node.args]
        if node.keywords or any(a is UNKNOWN for a in args):
            return UNKNOWN
        return range(*args) if node.func.id == "range" else len(args[0])
    return UNKNOWN
