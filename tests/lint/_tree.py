"""A parsed and indexed snippet, for the analyses of lint/analysis/ built alone."""

from __future__ import annotations

import ast
import textwrap

from torchpact.lint.analysis.navigation import Navigation


def indexed(code: str) -> Navigation:
    nav = Navigation(ast.parse(textwrap.dedent(code)))
    nav.index()
    return nav


def find(nav: Navigation, kind: type, pred=lambda n: True) -> list:
    return [n for n in nav.nodes(kind) if pred(n)]


def name_read(nav: Navigation, name: str, which: int = -1) -> ast.Name:
    return find(nav, ast.Name, lambda n: n.id == name and isinstance(n.ctx, ast.Load))[which]


def call_of(nav: Navigation, attr: str, which: int = 0) -> ast.Call:
    return find(nav, ast.Call, lambda c: getattr(c.func, "attr", getattr(c.func, "id", None)) == attr)[which]
