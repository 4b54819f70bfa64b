"""The two things that go wrong under CUDA graphs, where the code shows them (TP802).

A function compiled with a CUDA-graph mode is found by what the compile is bound to: the name or
``self`` attribute assigned ``torch.compile(...)``, the function a ``@torch.compile(...)`` decorates,
the module ``m.compile(...)`` compiles in place. Its calls are then read for:

- a varying input shape: the call sits in a loop and its input is made with a size taken from the
  loop's variable (``torch.randn(n, d)``, ``x.view(n, -1)``, ``tokens[:, :t]``);
- an output that outlives the next call: what the call returns (or a view of it: an index, a field,
  ``.detach()``, ``.view()``) is stored in a container or on an object inside the loop that calls
  again, or bound to a name that is read after a later call; ``.clone()``, ``.cpu()``, ``.item()``
  and arithmetic make a copy, which is safe.
"""

from __future__ import annotations

import ast

from torchpact.lint.context import FileContext
from torchpact.lint.analysis.following import follows_definitions

# Tensor methods whose result shares the output's memory (so it is overwritten with it).
_VIEWS = frozenset({"view", "view_as", "reshape", "detach", "squeeze", "unsqueeze", "transpose", "permute",
                    "expand", "expand_as", "t", "narrow", "flatten", "contiguous", "unflatten", "chunk", "split",
                    "unbind", "values", "items"})
_STORES = frozenset({"append", "extend", "insert", "appendleft", "add", "put", "update", "setdefault"})
_FACTORIES = frozenset({"randn", "rand", "zeros", "ones", "empty", "full", "arange", "randint", "randperm",
                        "linspace", "tensor"})
_RESHAPES = frozenset({"view", "reshape", "expand", "narrow", "repeat", "new_zeros", "new_ones", "new_empty",
                       "new_full", "resize_", "unflatten"})


def compiled_calls(compile_call: ast.Call, ctx: FileContext) -> list[ast.Call]:
    """The calls of what ``compile_call`` compiles, where the file shows them."""
    parent = ctx.parent(compile_call)
    func = compile_call.func
    if isinstance(parent, ast.Expr) and isinstance(func, ast.Attribute) and func.attr == "compile" \
            and ctx.call_name(compile_call) != "torch.compile":
        return _calls_of_text(ctx.segment(func.value), compile_call, ctx)  # `model.compile(...)` in place
    if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) and compile_call in parent.decorator_list:
        return _calls_of_function(parent, ctx)
    if isinstance(parent, ast.Call) and parent.func is compile_call:
        grand = ctx.parent(parent)  # `torch.compile(mode=...)(fn)`
        parent, compile_call = grand, parent
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        target = parent.targets[0]
        if isinstance(target, ast.Name):
            return [c for c in ctx.nodes(ast.Call) if isinstance(c.func, ast.Name) and c.func.id == target.id
                    and any(o is parent for o, _ in ctx.bindings(c.func))]
        if isinstance(target, ast.Attribute):
            return _calls_of_text(ctx.segment(target), compile_call, ctx)
    return []


def _calls_of_text(text: str, anchor: ast.AST, ctx: FileContext) -> list[ast.Call]:
    """Calls whose callee is spelled ``text``: in the class for ``self.x``, else in the anchor's scope."""
    if text.startswith("self."):
        root = ctx.enclosing_class(anchor)
    else:
        root = ctx.scope(anchor)
    if root is None:
        return []
    return [n for n in ast.walk(root) if isinstance(n, ast.Call) and n.lineno >= 1
            and isinstance(n.func, (ast.Name, ast.Attribute)) and ctx.segment(n.func) == text
            and n is not anchor]


def _calls_of_function(fn: ast.FunctionDef | ast.AsyncFunctionDef, ctx: FileContext) -> list[ast.Call]:
    cls = ctx.enclosing_class(fn)
    out = []
    for c in ctx.nodes(ast.Call):
        f = c.func
        if cls is None and isinstance(f, ast.Name) and f.id == fn.name:
            out.append(c)
        elif cls is not None and isinstance(f, ast.Attribute) and f.attr == fn.name \
                and isinstance(f.value, ast.Name) and f.value.id == "self":
            out.append(c)
    return out


# ------------------------------------------------------------------------------------ shapes
def varying_shape(calls: list[ast.Call], ctx: FileContext) -> tuple[ast.Call, str] | None:
    """(call, loop variable) where a call's input is sized by the variable of a loop around it."""
    for call in calls:
        for loop in ctx.enclosing_loops(call):
            if not isinstance(loop, (ast.For, ast.AsyncFor)):
                continue
            names = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                found = _sized_by(arg, names, loop, ctx, 3)
                if found:
                    return call, found
    return None


@follows_definitions(None)
def _sized_by(expr: ast.AST, names: set[str], loop: ast.AST, ctx: FileContext, depth: int) -> str | None:
    for node in ast.walk(expr):
        sizes: list[ast.AST] = []
        if isinstance(node, ast.Call):
            qn = ctx.call_name(node) or ""
            if qn.startswith("torch.") and qn.rsplit(".", 1)[-1] in _FACTORIES and qn.count(".") == 1:
                sizes = [*node.args, *(k.value for k in node.keywords if k.arg in ("size", "end", "high"))]
                if qn == "torch.tensor":
                    sizes = node.args[:1]
            elif isinstance(node.func, ast.Attribute) and node.func.attr in _RESHAPES:
                sizes = [*node.args]
        elif isinstance(node, ast.Subscript):
            sizes = [s for s in ast.walk(node.slice) if isinstance(s, ast.Slice)]
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and depth > 0 and node.id not in names:
            for owner, value in ctx.bindings(node):
                if value is not None and isinstance(value, ast.expr) and any(a is loop for a in ctx.ancestors(owner)):
                    found = _sized_by(value, names, loop, ctx, depth - 1)
                    if found:
                        return found
        for size in sizes:
            for n in ast.walk(size):
                if isinstance(n, ast.Name) and n.id in names:
                    return n.id
    return None


# ------------------------------------------------------------------------------------ outputs
def kept_output(calls: list[ast.Call], ctx: FileContext) -> tuple[ast.Call, ast.AST] | None:
    """(call, the statement that keeps its output) where an output outlives the next call."""
    for call in calls:
        loops = ctx.enclosing_loops(call)
        value, parent = _through_views(call, ctx)
        if loops and _stored(value, parent, ctx):
            return call, ctx.statement(call) or call
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
            kept = _name_kept(parent, parent.targets[0].id, call, calls, loops, ctx)
            if kept is not None:
                return call, kept
    return None


def _through_views(expr: ast.AST, ctx: FileContext) -> tuple[ast.AST, ast.AST | None]:
    """Climb from ``expr`` through views of it (index, field, tuple element, ``.detach()``...)."""
    parent = ctx.parent(expr)
    while True:
        if isinstance(parent, ast.Subscript) and parent.value is expr:
            pass
        elif isinstance(parent, ast.Attribute) and parent.value is expr:
            grand = ctx.parent(parent)
            if isinstance(grand, ast.Call) and grand.func is parent:
                if parent.attr not in _VIEWS:
                    return expr, parent
                parent = grand
        elif isinstance(parent, (ast.Tuple, ast.List)) and isinstance(parent.ctx, ast.Load):
            pass
        else:
            return expr, parent
        expr, parent = parent, ctx.parent(parent)


def _stored(value: ast.AST, parent: ast.AST | None, ctx: FileContext) -> bool:
    """``outs.append(value)``, ``cache[k] = value``, ``self.last = value``."""
    if isinstance(parent, ast.Call) and value in parent.args and isinstance(parent.func, ast.Attribute) \
            and parent.func.attr in _STORES:
        return True
    if isinstance(parent, ast.Assign) and parent.value is value:
        return any(isinstance(t, (ast.Subscript, ast.Attribute)) for t in parent.targets)
    return False


def _name_kept(assign: ast.Assign, name: str, call: ast.Call, calls: list[ast.Call], loops: list[ast.AST],
               ctx: FileContext) -> ast.AST | None:
    """The read of ``name`` (bound to the output) that keeps it past the next call, if any."""
    scope = ctx.scope(assign)
    body = scope.body if isinstance(getattr(scope, "body", None), list) else [scope]
    later_calls = [c for c in calls if c is not call and ctx.scope(c) is scope and c.lineno > assign.end_lineno]
    for node in ctx.walk_scope(body):
        if not (isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)):
            continue
        if not any(o is assign for o, _ in ctx.bindings(node)):
            continue
        value, parent = _through_views(node, ctx)
        if loops and _stored(value, parent, ctx) and any(a is loops[0] for a in ctx.ancestors(node)):
            return ctx.statement(node)
        if any(c.lineno < node.lineno for c in later_calls):
            return ctx.statement(node)
    return None
