"""This file's own functions and classes: by name, which classes are nn.Modules, their methods, and
what calls to them reach."""

from __future__ import annotations

import ast
from functools import cached_property
from typing import Callable, Iterable

from torchpact.lint.analysis.bindings import Bindings
from torchpact.lint.analysis.imports import Imports
from torchpact.lint.analysis.navigation import FUNCTION_TYPES, Navigation
from torchpact.lint.kinds import MODULE_RETURNING_METHODS, NN_MODULE_BASES, is_torch_nn_class
from torchpact.lint.analysis.following import follows_definitions

Function = ast.FunctionDef | ast.AsyncFunctionDef


class Definitions:
    """The functions and classes defined in one file."""

    def __init__(self, navigation: Navigation, imports: Imports, bindings: Bindings):
        self._navigation = navigation
        self._imports = imports
        self._bindings = bindings
        self._module_class_memo: dict[int, ast.ClassDef | None] = {}
        self._parameter_free_memo: dict[str, bool] = {}

    @cached_property
    def functions(self) -> dict[str, list[Function]]:
        """Functions and methods defined in the file, by bare name."""
        out: dict[str, list[Function]] = {}
        for node in self._navigation.nodes(ast.FunctionDef, ast.AsyncFunctionDef):
            out.setdefault(node.name, []).append(node)  # type: ignore[attr-defined, arg-type]
        return out

    @cached_property
    def classes(self) -> dict[str, ast.ClassDef]:
        return {n.name: n for n in self._navigation.nodes(ast.ClassDef)}  # type: ignore[attr-defined, misc]

    @cached_property
    def module_classes(self) -> dict[str, ast.ClassDef]:
        """Classes in this file that are nn.Modules (directly, or through another such class)."""
        found: dict[str, ast.ClassDef] = {}
        changed = True
        while changed:
            changed = False
            for name, cls in self.classes.items():
                if name in found:
                    continue
                for base in cls.bases:
                    qn = self._imports.resolve(base)
                    local = base.id if isinstance(base, ast.Name) else None
                    if (qn and (qn in NN_MODULE_BASES or is_torch_nn_class(qn))) or (local in found):
                        found[name] = cls
                        changed = True
                        break
        return found

    def parameter_free_class(self, cls: ast.ClassDef) -> bool:
        """A class of this file whose instances hold no parameter: its bases are ``torch.nn.Module``
        itself or such classes of this file, and no method stores anything on ``self`` but constants (a
        submodule, a ``Parameter`` or an argument stored there may hold parameters) nor registers one.
        A call of such a module gives an output that requires grad only if an input does (as for
        torch's own parameter-free layers, ``PARAMETER_FREE_MODULES``)."""
        memo = self._parameter_free_memo
        if cls.name not in memo:
            memo[cls.name] = self._parameter_free(cls, set())
        return memo[cls.name]

    def _parameter_free(self, cls: ast.ClassDef, seen: set[str]) -> bool:
        if cls.name in seen:
            return False
        seen.add(cls.name)
        for base in cls.bases:
            local = self.classes.get(base.id) if isinstance(base, ast.Name) else None
            if local is not None and local is not cls:
                if not self._parameter_free(local, seen):
                    return False
            elif self._imports.resolve(base) not in ("torch.nn.Module", "torch.nn.modules.module.Module"):
                return False
        for node in ast.walk(cls):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                stores = any(not isinstance(t, ast.Name) for t in targets)  # on self, or on anything but a local
                if stores and not (node.value is not None and _literal(node.value)):
                    return False
            elif isinstance(node, ast.Call):
                f = node.func
                if (isinstance(f, ast.Attribute) and f.attr in _SELF_REGISTERING) or (
                        isinstance(f, ast.Name) and f.id == "setattr"):
                    return False
        return True

    def makes_parameter_free(self, value: ast.AST) -> bool:
        """``Swish()``: an instance of a class of this file that can hold no parameter."""
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)):
            return False
        cls = self.module_classes.get(value.func.id)
        return cls is not None and self.parameter_free_class(cls)

    def method(self, cls: ast.ClassDef, name: str) -> Function | None:
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                return stmt
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in self.classes and base.id != cls.name:
                found = self.method(self.classes[base.id], name)
                if found is not None:
                    return found
        return None

    @follows_definitions(None)
    def local_module_class(self, expr: ast.AST) -> ast.ClassDef | None:
        """The local nn.Module class an expression is an instance of, when it can be told."""
        key = id(expr)
        if key in self._module_class_memo:
            return self._module_class_memo[key]  # None while in progress: ``model = model.to(rank)``
        self._module_class_memo[key] = None
        found = None
        for value in self._bindings.values(expr):
            if isinstance(value, ast.Call):
                func = value.func
                if isinstance(func, ast.Name) and func.id in self.module_classes:
                    found = self.module_classes[func.id]
                elif isinstance(func, ast.Attribute) and func.attr in MODULE_RETURNING_METHODS:
                    found = self.local_module_class(func.value)
                if found is not None:
                    break
        self._module_class_memo[key] = found
        return found

    def reaches(self, roots: Iterable[ast.AST], predicate: Callable[[ast.AST], bool],
                depth: int = 3) -> ast.AST | None:
        """First node under ``roots`` matching ``predicate``, following calls to functions of this file."""
        seen: set[int] = set()
        frontier = list(roots)
        walk = self._navigation.walk_scope_once
        for _ in range(depth + 1):
            nxt: list[ast.AST] = []
            for root in frontier:
                for node in walk(root if not isinstance(root, FUNCTION_TYPES) else root.body):
                    if predicate(node):
                        return node
                    if isinstance(node, ast.Call):
                        name = node.func.id if isinstance(node.func, ast.Name) else (
                            node.func.attr if isinstance(node.func, ast.Attribute)
                            and isinstance(node.func.value, ast.Name) and node.func.value.id == "self" else None)
                        for fn in self.functions.get(name or "", []):
                            if id(fn) not in seen:
                                seen.add(id(fn))
                                nxt.append(fn)
            frontier = nxt
            if not frontier:
                break
        return None


# Calls by which a module gains parameters or submodules after construction.
_SELF_REGISTERING = frozenset({"register_parameter", "register_module", "add_module", "register_buffer", "apply",
                               "load_state_dict", "to_empty"})


def _literal(node: ast.AST) -> bool:
    """A literal (number, string, bool, None) or a tuple/list of them."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp):
        return _literal(node.operand)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_literal(e) for e in node.elts)
    return False
