"""What the names of a file stand for: its imports, and the dotted origin of a name or call."""

from __future__ import annotations

import ast
from functools import cached_property
from typing import Iterable

from torchpact.lint.analysis.navigation import Navigation

_CANONICAL_PREFIXES = [
    ("torch.nn.modules.loss.", "torch.nn."),
    ("torch.nn.modules.", None),
    ("torch.nn.parallel.distributed.", "torch.nn.parallel."),
    ("torch.utils.data.dataloader.", "torch.utils.data."),
    ("torch.utils.data.distributed.", "torch.utils.data."),
    ("torch.cuda.amp.grad_scaler.", "torch.cuda.amp."),
    ("torch.functional.", "torch."),
]


def dotted(parts: Iterable[str]) -> str:
    return ".".join(parts)


def canonical(qn: str) -> str:
    """Map internal module paths to the public ones rules compare against."""
    for prefix, repl in _CANONICAL_PREFIXES:
        if qn.startswith(prefix):
            rest = qn[len(prefix):]
            if repl is None:  # torch.nn.modules.<file>.<Class> -> torch.nn.<Class>
                parts = rest.split(".")
                return "torch.nn." + parts[-1] if len(parts) >= 2 and parts[-1][:1].isupper() else qn
            return repl + rest
    return qn


class Imports:
    """The file's import aliases and what its names and calls resolve to."""

    def __init__(self, navigation: Navigation):
        self._navigation = navigation
        self._imports: dict[str, bool] = {}
        self._call_names: dict[int, str | None] = {}

    @cached_property
    def aliases(self) -> dict[str, str]:
        """Local name -> dotted origin, from every import in the file (any depth)."""
        out: dict[str, str] = {}
        for node in self._navigation.nodes(ast.Import, ast.ImportFrom):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        out[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        out.setdefault(top, top)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if a.name != "*":
                        out[a.asname or a.name] = f"{node.module}.{a.name}"
        return out

    def imports(self, package: str) -> bool:
        """Whether the file imports ``package`` or one of its modules (anywhere in it)."""
        found = self._imports.get(package)
        if found is None:
            dot = package + "."
            found = self._imports[package] = any(v == package or v.startswith(dot) for v in self.aliases.values())
        return found

    def resolve(self, expr: ast.AST | None) -> str | None:
        """Dotted origin of a name or attribute chain: ``nn.Linear`` -> ``torch.nn.Linear``."""
        parts: list[str] = []
        cur = expr
        while isinstance(cur, ast.Attribute):
            parts.append(cur.attr)
            cur = cur.value
        if not isinstance(cur, ast.Name):
            return None
        base = self.aliases.get(cur.id)
        if base is None:
            return None
        parts.append(base)
        return canonical(dotted(reversed(parts)))

    def call_name(self, call: ast.AST) -> str | None:
        """``resolve`` of a call's callee; memoised, since most rules ask it of every call."""
        if not isinstance(call, ast.Call):
            return None
        key = id(call)
        memo = self._call_names
        if key in memo:
            return memo[key]
        name = memo[key] = self.resolve(call.func)
        return name

    def is_call_to(self, node: ast.AST, *names: str) -> bool:
        qn = self.call_name(node)
        return qn is not None and qn in names
