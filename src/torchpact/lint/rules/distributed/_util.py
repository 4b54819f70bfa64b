"""Shared analysis for the distributed rules: where DDP wraps a module, and whether a file is a DDP script."""

from __future__ import annotations

import ast
import re
from typing import Iterator

from torchpact.lint.context import FileContext
from torchpact.lint.rule import last_names

DDP_CLASSES = {"torch.nn.parallel.DistributedDataParallel"}
# The engine's pre-filter (``Rule.calls``) for rules that start with is_ddp_call.
DDP_CALLEES = last_names(DDP_CLASSES)
FSDP_CLASSES = {
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_shard",
    "torch.distributed._composable.fsdp.fully_shard",
}
INIT_PROCESS_GROUP = {"torch.distributed.init_process_group", "torch.distributed.distributed_c10d.init_process_group"}


def is_ddp_call(ctx: FileContext, node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and ctx.call_name(node) in DDP_CLASSES


def ddp_calls(ctx: FileContext) -> list[ast.Call]:
    return [n for n in ctx.nodes(ast.Call) if ctx.call_name(n) in DDP_CLASSES]


def is_multiprocess_script(ctx: FileContext) -> bool:
    """The file starts a process group or wraps a model in DDP / FSDP: it runs once per rank."""
    names = DDP_CLASSES | FSDP_CLASSES | INIT_PROCESS_GROUP
    return any(ctx.call_name(n) in names for n in ctx.nodes(ast.Call))


def target_names(ctx: FileContext, value: ast.AST) -> set[str]:
    """The dotted names (``ddp``, ``self.model``) a value is assigned to."""
    parent = ctx.parent(value)
    if isinstance(parent, ast.Assign):
        targets = parent.targets
    elif isinstance(parent, (ast.AnnAssign, ast.NamedExpr)):
        targets = [parent.target]
    else:
        return set()
    return {t for t in (dotted_name(x) for x in targets) if t}


def dotted_name(expr: ast.AST) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    parts.append(expr.id)
    return ".".join(reversed(parts))


def after(node: ast.AST, anchor: ast.AST) -> bool:
    """Whether ``node`` starts after ``anchor`` ends, in source order."""
    end = getattr(anchor, "end_lineno", None) or anchor.lineno  # type: ignore[attr-defined]
    return node.lineno > end  # type: ignore[attr-defined]


# Per-process ids that scripts compare with 0 to pick the main process (`if self.gpu_id == 0:`), on
# top of the rank words RankGuards knows.
_PROCESS_ID = re.compile(r"^(gpu|gpu_id|gpu_idx|gpu_index|device_id|device_idx|proc_id|proc_idx|process_id|"
                         r"process_idx|process_index|local_process_index|global_process_index)$", re.I)


def in_process_id_guard(ctx: FileContext, node: ast.AST) -> bool:
    """``node`` is under a test of a per-process GPU / process index against 0 (``if self.gpu_id == 0:``)."""
    child = node
    for anc in ctx.ancestors(node):
        if isinstance(anc, (ast.If, ast.IfExp)) and child is not anc.test and _tests_process_id(anc.test):
            return True
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            break
        body = getattr(anc, "body", None)
        if isinstance(body, list) and child in body:
            for stmt in body[: body.index(child)]:
                if isinstance(stmt, ast.If) and _tests_process_id(stmt.test) and stmt.body and isinstance(
                        stmt.body[-1], (ast.Return, ast.Raise, ast.Continue)):
                    return True
        child = anc
    return False


def _tests_process_id(test: ast.AST) -> bool:
    for node in ast.walk(test):
        if isinstance(node, ast.Compare) and any(_mentions_process_id(x) for x in [node.left, *node.comparators]):
            if any(_is_zero(x) for x in [node.left, *node.comparators]):
                return True
    return False


def _mentions_process_id(expr: ast.AST) -> bool:
    name = expr.id if isinstance(expr, ast.Name) else expr.attr if isinstance(expr, ast.Attribute) else None
    return bool(name and _PROCESS_ID.match(name))


def _is_zero(expr: ast.AST) -> bool:
    if isinstance(expr, ast.Constant) and expr.value == 0 and not isinstance(expr.value, bool):
        return True
    return isinstance(expr, (ast.Tuple, ast.List, ast.Set)) and any(_is_zero(e) for e in expr.elts)


def exclusive_branches(ctx: FileContext, a: ast.AST, b: ast.AST) -> bool:
    """``a`` and ``b`` sit in different branches of one ``if`` (or ``try`` handlers): never both run."""
    path_a = {id(x): child for x, child in _ancestor_children(ctx, a)}
    for anc, child_b in _ancestor_children(ctx, b):
        child_a = path_a.get(id(anc))
        if child_a is None:
            continue
        if isinstance(anc, (ast.If, ast.IfExp)):
            return _branch(anc, child_a) != _branch(anc, child_b)
        return False
    return False


def _ancestor_children(ctx: FileContext, node: ast.AST):
    child = node
    for anc in ctx.ancestors(node):
        yield anc, child
        child = anc


def _branch(node: ast.If | ast.IfExp, child: ast.AST) -> str:
    if isinstance(node, ast.IfExp):
        return "test" if child is node.test else "body" if child is node.body else "orelse"
    if child is node.test:
        return "test"
    return "body" if child in node.body else "orelse"


def wrapped_names(inner: str | None, outer: set[str]) -> tuple[set[str], set[str]]:
    """(roots, users) after ``outer = DDP(inner)``: the names the wrapped model goes by (the module, the
    wrapper, ``wrapper.module``), and those that run it through the wrapper."""
    roots = {r for r in (inner, *outer) if r} | {f"{o}.module" for o in outer}
    return roots, outer | {r for r in roots if r != inner}


def method_calls_after(ctx: FileContext, scope: ast.AST, anchor: ast.AST) -> Iterator[tuple[ast.Call, str]]:
    """Each method call ``receiver.m(...)`` of ``scope`` after the statement ``anchor``, with the receiver's
    dotted name (calls on other receivers, such as a call's result, left out)."""
    for sub in ctx.walk_scope(scope):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and after(sub, anchor):
            receiver = dotted_name(sub.func.value)
            if receiver is not None:
                yield sub, receiver


def rooted_in(receiver: str, roots: set[str]) -> bool:
    """``ddp.module.fc`` is rooted in ``{"ddp"}``."""
    return any(receiver == r or receiver.startswith(r + ".") for r in roots)


def trained_after(ctx: FileContext, scope: ast.AST, conversion: ast.Call, users: set[str]) -> bool:
    """The DDP model is called, or something back-propagated, after the conversion (or in its loop)."""
    loops = {id(loop) for loop in ctx.enclosing_loops(conversion)}
    for sub in ctx.walk_scope(scope):
        if not isinstance(sub, ast.Call):
            continue
        is_forward = dotted_name(sub.func) in users
        is_backward = isinstance(sub.func, ast.Attribute) and sub.func.attr == "backward"
        if not (is_forward or is_backward):
            continue
        if after(sub, ctx.statement(conversion)) or any(id(loop) in loops for loop in ctx.enclosing_loops(sub)):
            return True
    return False
