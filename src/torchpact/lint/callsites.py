"""What a parameter of one of this file's functions receives at the calls this file makes to it.

``train(MyNet(), loader)`` at the bottom of a script tells what ``model`` holds inside ``def
train(model, loader)``: the kinds analysis (lint/kinds.py) joins the kinds of the argument over every
call site, and the numerics rules follow the argument to the class whose ``forward`` they read.

A site passes a value by position, by keyword, or leaves the parameter to its default; a ``*args`` /
``**kwargs`` that may cover the parameter is a site whose value is not seen (``None``). A call the
function makes to itself with its own parameter adds nothing and is skipped.

Whether the sites found are all the calls there are (``closed``): a function nested in another one,
or a ``_private`` function or method, whose name is used nowhere but as the callee of those calls. Any
other function may also be called from other modules with something else, so what its sites say
holds on some paths only (the kinds analysis caps it at ``may``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchpact.lint.context import FileContext

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_MAX_SITES = 32  # a helper called from more places than this is a library function: no typing


@dataclass(frozen=True)
class Sources:
    """The values one parameter receives: one entry per call site (None where it is not seen)."""

    function: str
    values: tuple[ast.AST | None, ...]
    closed: bool


def parameter_sources(ctx: FileContext, arg: ast.arg) -> Sources | None:
    """The call sites' values for parameter ``arg``; None when its function is not one whose calls this
    file can place (a lambda, a ``*args`` parameter, an ambiguous name, too many sites)."""
    key = ("parameter_sources", id(arg))
    if key in ctx.memo:
        return ctx.memo[key]  # type: ignore[return-value]
    found = ctx.memo[key] = _sources(ctx, arg)
    return found


def _sources(ctx: FileContext, arg: ast.arg) -> Sources | None:
    arguments = ctx.parent(arg)
    fn = ctx.parent(arguments) if arguments is not None else None
    if not isinstance(fn, _FUNCTIONS) or not isinstance(arguments, ast.arguments):
        return None
    owner = ctx.parent(fn)
    method = isinstance(owner, ast.ClassDef)
    decorators = {d.id if isinstance(d, ast.Name) else d.attr if isinstance(d, ast.Attribute) else ""
                  for d in fn.decorator_list}
    if method and "staticmethod" not in decorators and ("property" in decorators or "setter" in decorators):
        return None
    positional = [*arguments.posonlyargs, *arguments.args]
    skip = 1 if method and "staticmethod" not in decorators else 0
    if arg in positional:
        position: int | None = positional.index(arg) - skip
        if position is not None and position < 0:
            return None  # ``self`` / ``cls``
    elif arg in arguments.kwonlyargs:
        position = None
    else:
        return None  # ``*args`` / ``**kwargs``
    default = _default(arguments, arg)
    index = _index(ctx)
    if method:
        sites, escaped = index.methods.get((id(owner), fn.name), ([], False))
        if len([f for f in owner.body if isinstance(f, _FUNCTIONS) and f.name == fn.name]) != 1:
            return None
    else:
        defs = index.plain_defs.get(fn.name, [])
        if len(defs) != 1:
            return None  # two functions of one name: which one a call runs is not told here
        sites, escaped = index.plain.get(fn.name, ([], False))
    if len(sites) > _MAX_SITES:
        return None
    values: list[ast.AST | None] = []
    for call in sites:
        value = _value_at(call, arg, position, default)
        if value is _NO_CALL:
            continue
        if (isinstance(value, ast.Name) and value.id == arg.arg
                and any(a is fn for a in ctx.ancestors(call))):
            continue  # ``f(model)`` inside ``f``: its own parameter passed on
        values.append(value)  # type: ignore[arg-type]
    closed = not escaped and _private(fn, owner)
    return Sources(fn.name, tuple(values), closed)


_NO_CALL = object()


def _value_at(call: ast.Call, arg: ast.arg, position: int | None, default: ast.AST | None) -> object:
    """What ``call`` binds ``arg`` to; None when a ``*args`` / ``**kwargs`` may hide it; _NO_CALL when
    the call would not bind it at all (a TypeError the rules need not reason about)."""
    if position is not None:
        for i, a in enumerate(call.args):
            if isinstance(a, ast.Starred):
                return None
            if i == position:
                return a
    for kw in call.keywords:
        if kw.arg == arg.arg:
            return kw.value
    if any(kw.arg is None for kw in call.keywords):
        return None
    return default if default is not None else _NO_CALL


def _default(arguments: ast.arguments, arg: ast.arg) -> ast.expr | None:
    positional = [*arguments.posonlyargs, *arguments.args]
    if arg in positional:
        offset = len(positional) - len(arguments.defaults)
        i = positional.index(arg)
        return arguments.defaults[i - offset] if i >= offset else None
    return arguments.kw_defaults[arguments.kwonlyargs.index(arg)]


def _private(fn: ast.AST, owner: ast.AST | None) -> bool:
    """Whether every call of ``fn`` is in this file: nested in a function, or named ``_private``."""
    if isinstance(owner, _FUNCTIONS):
        return True
    name = fn.name  # type: ignore[attr-defined]
    return name.startswith("_") and not name.endswith("__")


@dataclass
class _Index:
    # plain function name -> (its calls ``f(...)``, whether the name is also used otherwise)
    plain: dict[str, tuple[list[ast.Call], bool]]
    # (id(class), method name) -> (its calls ``self.m(...)`` in that class, used otherwise)
    methods: dict[tuple[int, str], tuple[list[ast.Call], bool]]
    plain_defs: dict[str, list[ast.AST]]


def _index(ctx: FileContext) -> _Index:
    found = ctx.memo.get("callsites_index")
    if found is None:
        found = ctx.memo["callsites_index"] = _build(ctx)
    return found  # type: ignore[return-value]


def _build(ctx: FileContext) -> _Index:
    plain_defs: dict[str, list[ast.AST]] = {}
    method_names: set[str] = set()
    for fn in ctx.nodes(ast.FunctionDef, ast.AsyncFunctionDef):
        if isinstance(ctx.parent(fn), ast.ClassDef):
            method_names.add(fn.name)  # type: ignore[attr-defined]
        else:
            plain_defs.setdefault(fn.name, []).append(fn)  # type: ignore[attr-defined]
    plain: dict[str, tuple[list[ast.Call], bool]] = {}
    methods: dict[tuple[int, str], tuple[list[ast.Call], bool]] = {}
    callees: set[int] = set()
    for call in ctx.nodes(ast.Call):
        func = call.func  # type: ignore[attr-defined]
        if type(func) is ast.Name and func.id in plain_defs:
            callees.add(id(func))
            plain.setdefault(func.id, ([], False))[0].append(call)  # type: ignore[arg-type]
        elif (type(func) is ast.Attribute and func.attr in method_names and type(func.value) is ast.Name
              and func.value.id in ("self", "cls")):
            cls = ctx.enclosing_class(call)
            if cls is not None:
                callees.add(id(func))
                methods.setdefault((id(cls), func.attr), ([], False))[0].append(call)  # type: ignore[arg-type]
    # a name used other than as a callee (passed as a callback, stored, exported) has calls not seen here
    for name in ctx.nodes(ast.Name):
        if name.id in plain_defs and id(name) not in callees and isinstance(name.ctx, ast.Load):  # type: ignore[attr-defined]
            sites = plain.get(name.id, ([], False))[0]  # type: ignore[attr-defined]
            plain[name.id] = (sites, True)  # type: ignore[attr-defined]
    for attr in ctx.nodes(ast.Attribute):
        if attr.attr in method_names and id(attr) not in callees:  # type: ignore[attr-defined]
            cls = ctx.enclosing_class(attr)
            for key in ([(id(cls), attr.attr)] if cls is not None else []):  # type: ignore[attr-defined]
                methods[key] = (methods.get(key, ([], False))[0], True)
    for node in ctx.nodes(ast.Constant):
        value = node.value  # type: ignore[attr-defined]
        if isinstance(value, str) and value in plain_defs:
            plain[value] = (plain.get(value, ([], False))[0], True)  # ``__all__ = ["train"]``, getattr
    return _Index(plain, methods, plain_defs)


def passed_values(ctx: FileContext, expr: ast.AST) -> list[ast.AST] | None:
    """What the call sites pass for ``expr`` when it is a plain name bound only as a parameter: the
    values, or None when that is not the case or some site passes something not seen."""
    found = passed(ctx, expr)
    return found[0] if found is not None else None


def passed(ctx: FileContext, expr: ast.AST) -> tuple[list[ast.AST], list[str]] | None:
    """``passed_values`` and the functions among them that other modules may call too (what holds
    for their calls here holds on some paths only)."""
    if not isinstance(expr, ast.Name):
        return None
    binds = ctx.bindings(expr)
    if not binds or not all(type(owner) is ast.arg and value is None for owner, value in binds):
        return None
    out: list[ast.AST] = []
    open_functions: list[str] = []
    for owner, _ in binds:
        sources = parameter_sources(ctx, owner)  # type: ignore[arg-type]
        if sources is None or not sources.values or any(v is None for v in sources.values):
            return None
        out.extend(sources.values)  # type: ignore[arg-type]
        if not sources.closed:
            open_functions.append(sources.function)
    return out, open_functions
