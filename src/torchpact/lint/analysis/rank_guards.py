"""Whether code runs on some ranks only: under a test of the rank, or after an early rank exit."""

from __future__ import annotations

import ast
import re

from torchpact.lint.analysis.bindings import Bindings
from torchpact.lint.analysis.navigation import Navigation

RANK_WORDS = re.compile(
    r"(^|_)(rank|local_rank|global_rank|node_rank|is_main_process|is_local_main_process|"
    r"is_world_process_zero|is_local_process_zero|is_global_zero|is_master|master_process|"
    r"is_main|main_process|is_rank_zero|rank_zero|rank0|is_primary|should_save)($|_)",
    re.I,
)


def mentions_rank(expr: ast.AST) -> bool:
    """Whether a name or attribute in ``expr`` speaks of the rank (``rank``, ``is_main_process``...)."""
    for node in ast.walk(expr):
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if name and RANK_WORDS.search(name):
            return True
    return False


class RankGuards:
    """The rank tests that guard the nodes of one file."""

    def __init__(self, navigation: Navigation, bindings: Bindings):
        self._navigation = navigation
        self._bindings = bindings

    def guarded(self, node: ast.AST) -> bool:
        """Whether ``node`` only runs on some ranks: under a rank test, or after an early rank exit."""
        child = node
        for anc in self._navigation.ancestors(node):
            if isinstance(anc, (ast.If, ast.IfExp)) and child is not anc.test and self.tests_rank(anc.test):
                return True
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(mentions_rank(d) for d in anc.decorator_list):
                    return True
                if anc.name and RANK_WORDS.search(anc.name):
                    return True
            body = getattr(anc, "body", None)
            if isinstance(body, list) and child in body:
                for stmt in body[: body.index(child)]:
                    if isinstance(stmt, ast.If) and _exits(stmt.body) and self.tests_rank(stmt.test):
                        return True
            child = anc
        return False

    def tests_rank(self, test: ast.AST) -> bool:
        """Whether a condition depends on the rank: it names one, or a flag bound from one
        (``args.save_logs = args.logs and is_master(args)`` ... ``if args.save_logs:``)."""
        if mentions_rank(test):
            return True
        for node in ast.walk(test):
            if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(getattr(node, "ctx", None), ast.Load):
                if any(v is not None and mentions_rank(v) for _, v in self._bindings.bindings(node)):
                    return True
        return False


def _exits(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise, ast.Continue)) or (
        bool(body) and isinstance(body[-1], ast.Expr) and isinstance(body[-1].value, ast.Call)
        and isinstance(body[-1].value.func, (ast.Name, ast.Attribute))
        and (getattr(body[-1].value.func, "id", None)
             or getattr(body[-1].value.func, "attr", None)) in ("exit", "_exit")
    )
