"""What a scope calls ``.backward()`` on."""

from __future__ import annotations

import ast
from typing import Callable, Iterator

# receivers of ``x.backward(loss)`` that run backward on their argument, unlike ``loss.backward(gradient)``
_BACKWARD_HELPERS = ("accelerator", "fabric", "self", "trainer", "engine", "strategy")


def backward_names(scope: ast.AST, walk: Callable[[list[ast.stmt]], Iterator[ast.AST]]) -> frozenset[str]:
    """Names on which ``.backward()`` is called (directly or via ``scaler.scale(x)``) in ``scope``,
    walked with ``walk`` (memoised on the scope node)."""
    cache = getattr(scope, "tp_backward_names", None)
    if cache is not None:
        return cache  # type: ignore[no-any-return]
    names = set()
    for node in walk(scope.body if isinstance(getattr(scope, "body", None), list) else [scope]):  # type: ignore[attr-defined, list-item]
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr in ("backward", "manual_backward") and node.args and _is_backward_helper(node):
            # accelerator.backward(loss), fabric.backward(loss), self.manual_backward(loss)
            target = node.args[0]
            if isinstance(target, ast.Name):
                names.add(target.id)
            elif isinstance(target, ast.Attribute):
                names.add(target.attr)
            continue
        if node.func.attr == "backward":
            target = node.func.value
            if (isinstance(target, ast.Call) and isinstance(target.func, ast.Attribute)
                    and target.func.attr == "scale" and target.args):
                target = target.args[0]
            if isinstance(target, ast.Name):
                names.add(target.id)
            elif isinstance(target, ast.Attribute):
                names.add(target.attr)
    result = frozenset(names)
    scope.tp_backward_names = result  # type: ignore[attr-defined]
    return result


def _is_backward_helper(call: ast.Call) -> bool:
    """``accelerator.backward(loss)``-style calls, as opposed to ``loss.backward(gradient)``."""
    receiver = call.func.value  # type: ignore[attr-defined]
    name = (receiver.id if isinstance(receiver, ast.Name)
            else receiver.attr if isinstance(receiver, ast.Attribute) else "")
    return call.func.attr == "manual_backward" or name in _BACKWARD_HELPERS  # type: ignore[attr-defined]
