"""Whether code runs with autograd recording: ``no_grad`` / ``inference_mode`` / ``set_grad_enabled``
blocks and decorators."""

from __future__ import annotations

import ast

from torchpact.lint.analysis.imports import Imports
from torchpact.lint.analysis.navigation import Navigation
from torchpact.lint.analysis.syntax import is_const

NO_GRAD_CONTEXTS = {
    "torch.no_grad", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad",
    "torch.inference_mode", "torch.autograd.inference_mode", "torch.autograd.grad_mode.inference_mode",
}
_SET_GRAD_ENABLED = ("torch.set_grad_enabled", "torch.autograd.set_grad_enabled")
_ENABLE_GRAD = ("torch.enable_grad", "torch.autograd.enable_grad")


class GradMode:
    """The grad mode of the nodes of one file, within their own function."""

    def __init__(self, navigation: Navigation, imports: Imports):
        self._navigation = navigation
        self._imports = imports

    def of_with(self, item: ast.withitem) -> str | None:
        """'disabled' / 'enabled' when a with-item switches grad mode, else None."""
        expr = item.context_expr
        qn = self._imports.call_name(expr) if isinstance(expr, ast.Call) else self._imports.resolve(expr)
        if qn in NO_GRAD_CONTEXTS:
            if (qn.endswith("inference_mode") and isinstance(expr, ast.Call) and expr.args
                    and is_const(expr.args[0], False)):
                return "enabled"
            return "disabled"
        if qn in _SET_GRAD_ENABLED and isinstance(expr, ast.Call):
            if expr.args and is_const(expr.args[0], False):
                return "disabled"
            if expr.args and is_const(expr.args[0], True):
                return "enabled"
            return None
        if qn in _ENABLE_GRAD:
            return "enabled"
        return None

    def disabled(self, node: ast.AST) -> bool:
        """Whether ``node`` runs under no_grad / inference_mode (block or decorator) in its function."""
        child = node
        for anc in self._navigation.ancestors(node):
            if isinstance(anc, (ast.With, ast.AsyncWith)) and child not in anc.items:
                for item in anc.items:
                    mode = self.of_with(item)
                    if mode is not None:
                        return mode == "disabled"
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return self.function_disables(anc)
            if isinstance(anc, ast.Lambda):
                return False
            child = anc
        return False

    def function_disables(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        """Whether a decorator of ``fn`` disables grad for its whole body."""
        for dec in fn.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            if self._imports.resolve(target) in NO_GRAD_CONTEXTS:
                return True
        return False
