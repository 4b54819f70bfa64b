"""Shared analysis for the numerics rules: what an expression's value was produced by.

The question these rules ask is "is this tensor the output of a softmax / sigmoid?" — through the
call itself, a variable assigned from it (the binding that reaches the use in straight-line code),
shape-only reshuffles (`.view`, `.squeeze`, indexing), an `nn.Softmax` module, or a model whose
output is one (`nn.Sequential(..., nn.Softmax(1))`, a local module whose `forward` returns it).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from torchpact.findings import Evidence
from torchpact.lint.callsites import parameter_sources, passed
from torchpact.lint.context import (DDP_WRAPPERS, LOOP_TYPES, MODULE, MODULE_RETURNING_METHODS, FileContext,
                                    argument)
from torchpact.lint.analysis.following import follows_definitions

# Methods that keep the values of their receiver (only layout or dtype change).
SHAPE_METHODS = {
    "view", "reshape", "flatten", "squeeze", "unsqueeze", "transpose", "permute", "contiguous",
    "float", "double", "to", "view_as", "reshape_as", "t", "cuda", "cpu", "type_as",
}


@dataclass(frozen=True)
class Activation:
    """One activation: its functional names, the tensor method, the module class."""

    functions: frozenset[str]
    method: str
    modules: frozenset[str]


SOFTMAX = Activation(frozenset({"torch.softmax", "torch.nn.functional.softmax", "torch.special.softmax"}),
                     "softmax", frozenset({"torch.nn.Softmax"}))
SIGMOID = Activation(frozenset({"torch.sigmoid", "torch.nn.functional.sigmoid", "torch.special.expit"}),
                     "sigmoid", frozenset({"torch.nn.Sigmoid"}))
# Layers whose output is an unnormalised score of any sign (no tensor method computes one).
RAW_SCORES = Activation(frozenset({"torch.nn.functional.linear", "torch.nn.functional.bilinear"}), "",
                        frozenset({"torch.nn.Linear", "torch.nn.LazyLinear", "torch.nn.Bilinear", "torch.nn.Conv1d",
                                   "torch.nn.Conv2d", "torch.nn.Conv3d"}))


def first_arg(call: ast.Call, keyword: str = "input") -> ast.expr | None:
    return argument(call, keyword, 0)


def direct_activation_call(ctx: FileContext, node: ast.AST, act: Activation) -> ast.expr | None:
    """The input of ``node`` when it is a call of ``act`` written out (function, method or module)."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    qn = ctx.resolve(func)
    if qn in act.functions:
        return first_arg(node)
    if isinstance(func, ast.Attribute) and act.method and func.attr == act.method and qn is None:
        recv = func.value
        if isinstance(recv, ast.Name) and recv.id in ("self", "cls"):
            return first_arg(node) if is_module_of(ctx, func, act) else None
        # ``x.softmax(dim)``: a tensor method (a module or a library object would not resolve to None
        # and take one argument, and is not a module by local dataflow)
        if MODULE not in ctx.kinds(recv) and len(node.args) + len(node.keywords) <= 2:
            return recv
        return None
    if is_module_of(ctx, func, act):
        return first_arg(node)
    return None


def is_module_of(ctx: FileContext, func: ast.AST, act: Activation) -> bool:
    return is_instance_of(ctx, func, act.modules)


@follows_definitions(False)
def is_instance_of(ctx: FileContext, func: ast.AST, classes: set[str] | frozenset[str], depth: int = 0) -> bool:
    """Whether ``func`` (what is called) is an instance of one of ``classes``, inline or by every binding."""
    if isinstance(func, ast.Call):
        return ctx.call_name(func) in classes
    if isinstance(func, (ast.Name, ast.Attribute)):
        found = passed(ctx, func) if depth < 4 else None
        if found is not None:  # a parameter: what this file's calls of its function pass
            values, open_functions = found
            if not all(is_instance_of(ctx, v, classes, depth + 1) for v in values):
                return False
            for name in open_functions:
                ctx.note(Evidence.MAY, f"`{ctx.segment(func)}` is what this file passes to `{name}`, which other "
                                       "modules may call with something else")
            return True
        name = func.attr if isinstance(func, ast.Attribute) else func.id
        if name not in _instance_names(ctx, classes):
            return False
        values = [v for _, v in ctx.bindings(func)]
        return bool(values) and all(isinstance(v, ast.Call) and ctx.call_name(v) in classes for v in values)
    return False


def _instance_names(ctx: FileContext, classes: set[str] | frozenset[str]) -> set[str]:
    """Last name of every assignment target whose value constructs one of ``classes`` (a cheap filter)."""
    memo = ctx.tree.__dict__.setdefault("_tp_numerics_instances", {})  # per file, like backward_names
    key = frozenset(classes)
    if key not in memo:
        names = set()
        for node in ctx.nodes(ast.Assign, ast.AnnAssign):
            if isinstance(node.value, ast.Call) and ctx.call_name(node.value) in classes:
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    if isinstance(t, (ast.Name, ast.Attribute)):
                        names.add(t.id if isinstance(t, ast.Name) else t.attr)
        memo[key] = names
    return memo[key]


def unwrap_shape(node: ast.AST) -> ast.AST:
    while True:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SHAPE_METHODS:
            node = node.func.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return node


def produced_by(ctx: FileContext, node: ast.AST, act: Activation, depth: int = 0) -> ast.AST | None:
    """The call of ``act`` whose output ``node`` holds (unchanged but for its shape), or None."""
    if depth > 4:
        return None
    node = unwrap_shape(node)
    if direct_activation_call(ctx, node, act) is not None:
        return node
    if isinstance(node, ast.Name):
        value = reaching_value(ctx, node)
        return produced_by(ctx, value, act, depth + 1) if value is not None else None
    # the output of a model whose last operation is the activation
    if (isinstance(node, ast.Call) and not node.keywords and len(node.args) == 1
            and model_ends_in(ctx, node.func, act, depth)):
        return node
    return None


def model_ends_in(ctx: FileContext, func: ast.AST, act: Activation, depth: int) -> bool:
    """Whether every model ``func`` may hold ends in ``act``: an ``nn.Sequential`` whose last layer is
    one, or a class of this file whose ``forward`` returns only its outputs. A model that arrives as a
    parameter is followed to its annotation or to what this file's calls pass (lint/callsites.py);
    when other modules may call that function too, the answer holds on some paths only (noted)."""
    open_functions: list[str] = []
    models = model_sources(ctx, func, open_functions, 0)
    if not models:
        return False
    for model in models:
        if isinstance(model, ast.Call):  # an nn.Sequential
            last = model.args[-1] if model.args and not model.keywords else None
            if not (isinstance(last, ast.Call) and ctx.call_name(last) in act.modules):
                return False
            continue
        forward = ctx.method(model, "forward")
        if forward is None:
            return False
        returns = [n for n in ctx.walk_scope(forward.body) if isinstance(n, ast.Return)]
        if not returns or not all(r.value is not None and produced_by(ctx, r.value, act, depth + 1) is not None
                                  for r in returns):
            return False
    for name in dict.fromkeys(open_functions):
        ctx.note(Evidence.MAY, f"the model is what this file passes to `{name}`, which other modules may call "
                               "with another model")
    return True


_MODEL_WRAPPERS = frozenset({*DDP_WRAPPERS, "torch.compile", "torch.jit.script", "torch.jit.trace"})
_SOURCES_DEPTH = 6


@follows_definitions(None)
def model_sources(ctx: FileContext, expr: ast.AST, open_functions: list[str],
                  depth: int) -> list[ast.Call | ast.ClassDef] | None:
    """The models ``expr`` may hold, each an ``nn.Sequential(...)`` call or a module class of this file;
    None when some path holds something else or something not seen. Followed through names, the
    methods that return their module (``.to(device)``), wrappers (``DDP(model)``, ``torch.compile``),
    and parameters (their annotation, else every call site of the function; a function other
    modules may call is added to ``open_functions``)."""
    if depth > _SOURCES_DEPTH:
        return None
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr in MODULE_RETURNING_METHODS:
            return model_sources(ctx, func.value, open_functions, depth + 1)
        qn = ctx.call_name(expr)
        if qn in _MODEL_WRAPPERS:
            inner = argument(expr, "module" if qn in DDP_WRAPPERS else "model", 0)
            return model_sources(ctx, inner, open_functions, depth + 1) if inner is not None else None
        if qn == "torch.nn.Sequential":
            return [expr]
        if isinstance(func, ast.Name) and qn is None and func.id in ctx.module_classes:
            return [ctx.module_classes[func.id]]
        return None
    if not isinstance(expr, (ast.Name, ast.Attribute)):
        return None
    binds = ctx.bindings(expr)
    if not binds:
        return None
    out: list[ast.Call | ast.ClassDef] = []
    for owner, value in binds:
        if value is None:
            found = _parameter_models(ctx, owner, open_functions, depth) if isinstance(owner, ast.arg) else None
        else:
            found = model_sources(ctx, value, open_functions, depth + 1)
        if not found:
            return None
        out.extend(found)
    return out


def _parameter_models(ctx: FileContext, arg: ast.arg, open_functions: list[str],
                      depth: int) -> list[ast.Call | ast.ClassDef] | None:
    annotation = arg.annotation
    if isinstance(annotation, ast.Name) and annotation.id in ctx.module_classes:
        return [ctx.module_classes[annotation.id]]  # ``model: MyNet``
    sources = parameter_sources(ctx, arg)
    if sources is None or not sources.values or any(v is None for v in sources.values):
        return None
    out: list[ast.Call | ast.ClassDef] = []
    for value in sources.values:
        found = model_sources(ctx, value, open_functions, depth + 1)  # type: ignore[arg-type]
        if not found:
            return None
        out.extend(found)
    if not sources.closed:
        open_functions.append(sources.function)
    return out


def _binds(stmt: ast.AST, name: str) -> bool:
    """Whether ``stmt`` (anywhere inside, not in nested scopes) binds ``name``."""
    for node in FileContext.walk_scope(stmt):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, (ast.Store, ast.Del)):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.alias) and (node.asname or node.name.split(".")[0]) == name:
            return True
    return False


class _Ambiguous(Exception):
    pass


def _last_binding(stmts: list[ast.stmt], name: str) -> ast.expr | None:
    """The value the last of ``stmts`` to bind ``name`` gives it; raises when that cannot be told."""
    for stmt in reversed(stmts):
        if not _binds(stmt, name):
            continue
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            return stmt.value
        if isinstance(stmt, ast.AnnAssign) and stmt.value is not None and isinstance(stmt.target, ast.Name):
            return stmt.value
        if isinstance(stmt, (ast.With, ast.AsyncWith)) and not any(
                item.optional_vars is not None and _binds(item.optional_vars, name) for item in stmt.items):
            found = _last_binding(stmt.body, name)
            if found is not None:
                return found
        raise _Ambiguous
    return None


def reaching_value(ctx: FileContext, name: ast.Name) -> ast.expr | None:
    """The value of the one assignment to ``name`` that reaches this use in straight-line code.

    None when the name is bound in a branch, a loop that may rebind it later, by unpacking, or not
    in this function at all.
    """
    child: ast.AST = ctx.statement(name)
    if child is None:
        return None
    try:
        for anc in ctx.ancestors(child):
            for field in ("body", "orelse", "finalbody", "handlers"):
                block = getattr(anc, field, None)
                if isinstance(block, list) and child in block:
                    if field != "body" and isinstance(anc, (ast.Try, *LOOP_TYPES)) and any(
                            _binds(s, name.id) for s in anc.body):
                        return None  # the try body / loop body may or may not have rebound it
                    before = block[: block.index(child)] if field != "handlers" else []
                    found = _last_binding(before, name.id)
                    if found is not None:
                        return found
                    if isinstance(anc, LOOP_TYPES) and field == "body":
                        # a binding later in the body reaches the next iteration
                        if any(_binds(s, name.id) for s in block[block.index(child):]):
                            return None
                        if isinstance(anc, (ast.For, ast.AsyncFor)) and _binds(anc.target, name.id):
                            return None
                    break
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.Module)):
                return None
            child = anc
    except _Ambiguous:
        return None
    return None


# ---------------------------------------------------------------------------------------- precision
FLOAT16 = {"torch.float16", "torch.half"}
SCALING_WORDS = ("scaler", "Scaler", "scale_loss", "loss_scale", "amp.initialize")


def is_backward_call(ctx: FileContext, node: ast.AST) -> bool:
    """``loss.backward()`` (any receiver, no positional argument) or ``torch.autograd.backward(...)``."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    if node.func.attr == "backward":
        qn = ctx.resolve(node.func)
        if qn is not None:
            return qn == "torch.autograd.backward"
        return not node.args  # ``accelerator.backward(loss)`` scales the loss itself
    return False


def is_optimizer_step(ctx: FileContext, node: ast.AST) -> bool:
    from torchpact.lint.context import OPTIMIZER, SCHEDULER

    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "step"):
        return False
    kinds = ctx.kinds(node.func.value)
    return OPTIMIZER in kinds and SCHEDULER not in kinds


def scope_trains(ctx: FileContext, scope: ast.AST) -> bool:
    """Whether ``scope`` calls ``backward()`` and steps an optimizer."""
    body = scope.body if isinstance(getattr(scope, "body", None), list) else [scope]
    nodes = [n for n in ctx.walk_scope(body) if isinstance(n, ast.Call)]
    return any(is_backward_call(ctx, n) for n in nodes) and any(is_optimizer_step(ctx, n) for n in nodes)


def uses_loss_scaling(ctx: FileContext) -> bool:
    text = ctx.source.text
    return any(word in text for word in SCALING_WORDS)


def is_float16(ctx: FileContext, expr: ast.AST | None) -> bool:
    return expr is not None and ctx.resolve(expr) in FLOAT16


def half_cast(ctx: FileContext, call: ast.AST) -> bool:
    """``x.half()``, ``x.to(torch.float16)``, ``x.to(dtype=torch.half)``, ``x.type(torch.float16)``."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        return False
    attr = call.func.attr
    if attr == "half":
        return not call.args and not call.keywords and ctx.resolve(call.func) is None
    if attr in ("to", "type"):
        args = list(call.args) + [kw.value for kw in call.keywords if kw.arg == "dtype"]
        return any(is_float16(ctx, a) for a in args)
    return False


def optimizer_constructors(ctx: FileContext) -> list[ast.Call]:
    """Calls constructing a ``torch.optim`` optimizer (not a scheduler) in the file."""
    out = []
    for call in ctx.nodes(ast.Call):
        qn = ctx.call_name(call)
        if (qn and qn.startswith("torch.optim.") and not qn.startswith("torch.optim.lr_scheduler.")
                and qn.rsplit(".", 1)[-1][:1].isupper()):
            out.append(call)
    return out


@follows_definitions(frozenset())
def parameter_owners(ctx: FileContext, params: ast.AST | None) -> set[str]:
    """Source texts of ``X`` in every ``X.parameters()`` / ``X.named_parameters()`` inside ``params``."""
    owners: set[str] = set()
    if params is None:
        return owners
    for node in ast.walk(params):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("parameters", "named_parameters")):
            owners.add(ctx.locator.source(node.func.value))
    if isinstance(params, ast.Name):
        for value in ctx.values(params):
            if value is not params:
                owners |= parameter_owners(ctx, value)
    return owners


def is_model(ctx: FileContext, expr: ast.AST) -> bool:
    """An nn.Module by local dataflow, or something whose parameters an optimizer is given."""
    if MODULE in ctx.kinds(expr):
        return True
    text = ctx.locator.source(expr)
    return any(text in parameter_owners(ctx, first_arg(c, "params")) for c in optimizer_constructors(ctx))


def backward_follows(ctx: FileContext, node: ast.AST, scope: ast.AST) -> bool:
    """Whether a ``backward()`` in ``scope`` runs after ``node``: later in the text, or in a loop around both."""
    loops = {id(loop) for loop in ctx.enclosing_loops(node)}
    body = scope.body if isinstance(getattr(scope, "body", None), list) else [scope]
    for call in ctx.walk_scope(body):
        if is_backward_call(ctx, call) and (
                call.lineno > node.lineno or any(id(loop) in loops for loop in ctx.enclosing_loops(call))):
            return True
    return False
