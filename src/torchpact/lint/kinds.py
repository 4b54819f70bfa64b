"""What a value holds (a module, an optimizer, a loss, a graph-attached tensor...), and how surely.

``kinds_of(ctx, expr)`` is the analysis behind ``FileContext.kinds``: a light, local dataflow that
tells a model from an optimizer from a loss without pretending to be a type checker. Each kind of a
value carries the level of evidence it was derived from:

- ``MUST``: from resolved definitions on every path: calls resolved through imports to torch's API,
  classes of this file, literals, annotations the user wrote;
- ``MAY``: present on only some of the definitions that reach the read, on some bindings of an
  attribute, on one side of a conditional expression, or inferred from how the value is used
  (``.backward()`` is called on it);
- ``UNRESOLVED``: only through a name hint (``model``, ``optimizer``, ``criterion``...) or anything
  else the analysis could not see.

A kind derived from another inherits its level: the output of calling a ``model`` known by its name
only is itself unresolved. Inside the analysis, levels travel as data (``Kinds.levels``) and asking
a :class:`Kinds` a question notes nothing. The sets rules get are :class:`Noted`: each question a rule
asks (``MODULE in kinds``, ``kinds & {LOSS, OUTPUT}`` as a truth value) notes the level of a "yes"
into the per-check :class:`Recorder`, which the engine reads at each hit. A "no" notes nothing: a
rule that fires because a value is *not* something says what that rests on with ``ctx.note``.

The kinds and torch's names for them are in lint/kind_tables.py, the levels, ``Kinds``, ``Noted`` and
``Recorder`` in lint/kind_levels.py; this module re-exports both. No object here refers to the file's
context, so the context, its memo and these sets form no reference cycle (lint runs with the cyclic
garbage collector off).
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING, Sequence

from torchpact.lint.callsites import parameter_sources, passed_values
from torchpact.lint.dataflow import _Iterated, _Unpacked
from torchpact.lint.kind_levels import (  # noqa: F401 - re-exported: rules and tests import them from here
    EMPTY, MAY, MUST, SURE, UNRESOLVED, WHY_BACKWARD, WHY_BRANCH, WHY_CALLERS, WHY_FIELD, WHY_HINT, WHY_INPUT,
    WHY_OPEN, WHY_OPTIONAL, WHY_PATHS, at_most, each, join, make, merge, noted, of, pick, reason, strongest,
    weaker, Entry, Kinds, Noted, Recorder,
)
from torchpact.lint.kind_tables import (  # noqa: F401 - re-exported: rules and tests import them from here
    BATCH, DDP, DDP_WRAPPERS, DIST_SAMPLER, FUNCTIONAL_LOSSES, GRAD_LEAF, GRAPH, GRAPH_CUTTING_METHODS,
    GRAPH_PRESERVING_METHODS, LOADER, LOSS, LOSS_FN, MODULE, MODULE_RETURNING_METHODS, NN_MODULE_BASES,
    NUMBER, OPTIMIZER, OUTPUT, PARAMETER_FREE_MODULES, PHRASE, SAMPLER, SCALER, SCHEDULER, TENSOR,
    is_torch_nn_class,
)

if TYPE_CHECKING:
    from torchpact.lint.context import FileContext

__all__ = [
    "BATCH", "DDP", "DDP_WRAPPERS", "DIST_SAMPLER", "EMPTY", "Entry", "FUNCTIONAL_LOSSES", "GRAD_LEAF",
    "GRAPH", "GRAPH_CUTTING_METHODS", "GRAPH_PRESERVING_METHODS", "Kinds", "LOADER", "LOSS", "LOSS_FN", "MAY",
    "MODULE", "MODULE_RETURNING_METHODS", "MUST", "NN_MODULE_BASES", "NUMBER", "Noted", "OPTIMIZER", "OUTPUT",
    "PARAMETER_FREE_MODULES", "PHRASE", "Recorder", "SAMPLER", "SCALER", "SCHEDULER", "SURE", "TENSOR",
    "UNRESOLVED", "WHY_BACKWARD", "WHY_BRANCH", "WHY_CALLERS", "WHY_FIELD", "WHY_HINT", "WHY_INPUT",
    "WHY_OPEN", "WHY_OPTIONAL", "WHY_PATHS", "annotation_kinds", "at_most", "each", "is_torch_nn_class",
    "join", "kinds_of", "make", "merge", "noted", "of", "pick", "reason", "strongest", "weaker",
]

_NAME_HINTS: list[tuple[re.Pattern[str], frozenset[str]]] = [
    (re.compile(r"^(model|net|network|ddp_model|student|teacher)$|_model$"), frozenset({MODULE})),
    (re.compile(r"^(optimizer|optimiser|optim)$|_optimizer$"), frozenset({OPTIMIZER})),
    (re.compile(r"^(criterion|loss_fn|loss_func|loss_function|loss_fct)$"), frozenset({LOSS_FN})),
    (re.compile(r"^(scaler|grad_scaler)$"), frozenset({SCALER})),
    (re.compile(r"^(scheduler|lr_scheduler)$"), frozenset({SCHEDULER})),
    (re.compile(r"(^|_)(data)?loader$"), frozenset({LOADER})),
]

# ``get_peft_model``, ``build_model``: functions that make a model, not a model to call.
_FACTORY_NAME = re.compile(r"^(get|build|create|make|load|init|prepare|wrap|unwrap|setup|convert|"
                           r"instantiate|construct|apply|freeze|from|to|save|export|compile|train|evaluate)_")


_MODULE, _LOSS_FN_MODULE, _DDP = of({MODULE}), of({MODULE, LOSS_FN}), of({MODULE, DDP})
_NUMBER, _TENSOR = of({NUMBER}), of({TENSOR})


# ------------------------------------------------------------------ the analysis
def kinds_of(ctx: FileContext, expr: ast.AST | None, hints: bool = True) -> Kinds:
    """What ``expr`` holds, with levels; memoised per file (see the module's docstring)."""
    if expr is None:
        return EMPTY
    key = (id(expr), hints)
    memo = ctx.value_kinds.computed.get(key)
    if memo is not None:
        return memo
    active = ctx.value_kinds.active
    if key in active or len(active) > 40:
        return EMPTY  # a loop-carried ``x = x.to(device)``, or absurdly deep nesting
    ctx.tick()
    active.add(key)
    try:
        result = _kinds(ctx, expr, hints)
    finally:
        active.discard(key)
    ctx.value_kinds.computed[key] = result
    return result


def _kinds(ctx: FileContext, expr: ast.AST, hints: bool) -> Kinds:
    t = type(expr)
    if t is ast.Name or t is ast.Attribute:
        return _name_kinds(ctx, expr, hints)
    if t is ast.Call:
        return _call_kinds(ctx, expr, hints)  # type: ignore[arg-type]
    if t is _Iterated:
        inner = kinds_of(ctx, expr.iterable, hints)  # type: ignore[attr-defined]
        return at_most({BATCH, TENSOR}, inner.levels[LOADER]) if LOADER in inner else EMPTY
    if t is _Unpacked:
        return pick(kinds_of(ctx, expr.value, hints), (OUTPUT, GRAPH, TENSOR, BATCH))  # type: ignore[attr-defined]
    if t is ast.BinOp:
        return _arithmetic(merge(kinds_of(ctx, expr.left, hints), kinds_of(ctx, expr.right, hints)))  # type: ignore[attr-defined]
    if t is ast.UnaryOp:
        return _arithmetic(kinds_of(ctx, expr.operand, hints))  # type: ignore[attr-defined]
    if t is ast.Subscript:
        inner = kinds_of(ctx, expr.value, hints)  # type: ignore[attr-defined]
        if MODULE in inner and not inner & {TENSOR, OUTPUT, BATCH}:
            return pick(inner, (MODULE,))  # ``net[0]``, ``self.blocks[i]``: a layer of a container module
        if OUTPUT in inner or BATCH in inner:
            return pick(inner, (OUTPUT, GRAPH, TENSOR, BATCH, LOSS))
        return pick(inner, (GRAPH, TENSOR))
    if t is ast.IfExp:
        return join([kinds_of(ctx, expr.body, hints), kinds_of(ctx, expr.orelse, hints)], "", WHY_BRANCH)  # type: ignore[attr-defined]
    if t is ast.Await:
        return kinds_of(ctx, expr.value, hints)  # type: ignore[attr-defined]
    if t is ast.Constant and isinstance(expr.value, (int, float)):  # type: ignore[attr-defined]
        return _NUMBER
    return EMPTY


def _arithmetic(both: Kinds) -> Kinds:
    """``a + b``, ``-a``: graph-attached where an operand is (a leaf requiring grad included)."""
    derived = pick(both, (LOSS, GRAPH, TENSOR, OUTPUT))
    leaf = both.levels.get(GRAD_LEAF)
    return merge(derived, at_most({GRAPH, TENSOR}, leaf)) if leaf is not None else derived


def _name_kinds(ctx: FileContext, expr: ast.AST, hints: bool) -> Kinds:
    binds = ctx.bindings(expr)
    name = expr.id if isinstance(expr, ast.Name) else expr.attr  # type: ignore[attr-defined]
    # One alternative per definition that reaches the read (every binding, for an attribute); an
    # argument's (value None) is a path on which nothing is known.
    alternatives = []
    for owner, value in binds:
        if value is None:
            if type(owner) is ast.arg:
                # what the user declared, and what this file's calls pass
                declared = annotation_kinds(ctx, owner.annotation) if owner.annotation is not None else EMPTY
                alternatives.append(merge(declared, _parameter_kinds(ctx, owner, hints)))
            else:
                alternatives.append(EMPTY)
            continue
        k = kinds_of(ctx, value, hints)
        if GRAPH in k and ctx.grad_disabled(owner):
            k = pick(k, k - {GRAPH})
        alternatives.append(k)
    out = join(alternatives, name) if alternatives else EMPTY
    if name in ctx.backward_names(ctx.scope(expr)) and NUMBER not in out:
        # backward() only works on graph-attached tensors
        out = merge(out, each((LOSS, TENSOR, GRAPH), MAY, WHY_BACKWARD, name, LOSS))
    if isinstance(expr, ast.Attribute) and expr.attr == "loss" and not binds:
        out = merge(out, each((LOSS, TENSOR), UNRESOLVED, WHY_FIELD, "loss", LOSS))
        if kinds_of(ctx, expr.value, hints) & {OUTPUT, GRAPH}:
            # ``outputs.loss`` of a model called with grad enabled
            out = merge(out, each((GRAPH,), UNRESOLVED, WHY_FIELD, "loss", LOSS))
    if not (out - {TENSOR}):
        annotated = [_annotation_of(ctx, owner, value) for owner, value in binds]
        if any(annotated):
            out = merge(out, join(annotated, name))
    if hints and not (out - {TENSOR}) and all(v is None for _, v in binds) and not _FACTORY_NAME.match(name):
        for pattern, kinds in _NAME_HINTS:
            if pattern.search(name):
                out = merge(out, each(kinds, UNRESOLVED, WHY_HINT, name))
    if isinstance(expr, ast.Attribute) and expr.attr == "module":
        ddp = kinds_of(ctx, expr.value, hints).levels.get(DDP)
        if ddp is not None:
            out = merge(out, at_most({MODULE}, ddp))
    return out


def _parameter_kinds(ctx: FileContext, arg: ast.arg, hints: bool) -> Kinds:
    """What a parameter holds by what this file's calls of its function pass (lint/callsites.py):
    joined over the sites, and at most MAY when other modules may call the function too."""
    sources = parameter_sources(ctx, arg)
    if sources is None or not sources.values:
        return EMPTY
    alternatives = []
    for value in sources.values:
        k = kinds_of(ctx, value, hints) if value is not None else EMPTY
        if GRAPH in k and value is not None and ctx.grad_disabled(value):
            k = pick(k, k - {GRAPH})
        alternatives.append(k)
    out = join(alternatives, arg.arg, WHY_CALLERS) if len(alternatives) > 1 else alternatives[0]
    if not sources.closed and out:
        out = make({k: e if e[0] <= MAY else (MAY, (WHY_OPEN, sources.function, k)) for k, e in out.levels.items()})
    return out


def _annotation_of(ctx: FileContext, owner: ast.AST, value: ast.AST | None) -> Kinds:
    annotation = getattr(owner, "annotation", None) if value is None or isinstance(owner, ast.AnnAssign) else None
    return annotation_kinds(ctx, annotation) if annotation is not None else EMPTY


def _call_kinds(ctx: FileContext, call: ast.Call, hints: bool) -> Kinds:
    qn = ctx.call_name(call)
    func = call.func
    if qn is not None:
        last = qn.rsplit(".", 1)[-1]
        if qn in DDP_WRAPPERS:
            return _DDP
        if qn.startswith("torch.nn.") and last[:1].isupper() and is_torch_nn_class(qn):
            if last.endswith("Loss"):
                return _LOSS_FN_MODULE
            if last == "Parameter":
                return of({GRAD_LEAF, TENSOR})
            return _MODULE
        if qn.startswith("torch.nn.functional.") and last in FUNCTIONAL_LOSSES:
            return merge(of({LOSS, TENSOR}), of({GRAPH}, _input_graph(ctx, call, hints, last)))
        if qn.startswith("torch.optim.lr_scheduler."):
            return of({SCHEDULER})
        if qn.startswith("torch.optim.") and last[:1].isupper():
            return of({OPTIMIZER})
        if qn in ("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"):
            return of({LOADER})
        if qn in ("torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler"):
            return of({SAMPLER, DIST_SAMPLER})
        if qn.startswith("torch.utils.data.") and last.endswith("Sampler"):
            return of({SAMPLER})
        if qn in ("torch.amp.GradScaler", "torch.cuda.amp.GradScaler", "torch.amp.grad_scaler.GradScaler"):
            return of({SCALER})
        if qn.startswith("torch.") and last[:1].islower():
            if qn in ("torch.compile", "torch.jit.script", "torch.jit.trace"):
                return kinds_of(ctx, call.args[0], hints) if call.args else _MODULE
            if _requires_grad_literal(call):
                return of({TENSOR, GRAD_LEAF})
            graph = None
            for a in call.args:
                e = strongest(kinds_of(ctx, a, hints), (GRAPH, GRAD_LEAF))
                if e is not None and (graph is None or e[0] > graph[0]):
                    graph = e
                    if e[0] == MUST:
                        break
            return merge(_TENSOR, of({GRAPH}, graph)) if graph is not None else _TENSOR
        if qn in ("builtins.float", "builtins.int"):
            return _NUMBER
    if isinstance(func, ast.Name):
        if func.id in ctx.module_classes:
            return _MODULE
        if func.id in ("float", "int", "len", "round"):
            return _NUMBER
    if isinstance(func, ast.Attribute):
        recv = kinds_of(ctx, func.value, hints)
        attr = func.attr
        if MODULE in recv and attr in MODULE_RETURNING_METHODS:
            return recv
        if attr in GRAPH_CUTTING_METHODS:
            if attr in ("item", "tolist"):
                return _NUMBER
            tensor = strongest(recv, (TENSOR, GRAPH, LOSS, OUTPUT, GRAD_LEAF))
            return at_most({TENSOR}, tensor) if tensor is not None else EMPTY
        if attr in GRAPH_PRESERVING_METHODS and recv & {GRAPH, LOSS, OUTPUT, GRAD_LEAF, TENSOR}:
            keep = pick(recv, (LOSS, OUTPUT, GRAPH, TENSOR))
            leaf = recv.levels.get(GRAD_LEAF)
            return merge(keep, at_most({GRAPH, TENSOR}, leaf)) if leaf is not None else keep
    callee = kinds_of(ctx, func, hints)
    loss_fn = callee.levels.get(LOSS_FN)
    if loss_fn is not None:
        graph = _input_graph(ctx, call, hints, _callee_text(func))
        return merge(at_most({LOSS, TENSOR}, loss_fn), of({GRAPH}, weaker(loss_fn, graph)))
    module = callee.levels.get(MODULE)
    if module is not None:
        if _parameter_free(ctx, func):
            # no parameter: the output is on a graph only as surely as an input is
            graph = _attached_input(ctx, call, hints)
            out = at_most({OUTPUT, TENSOR}, module)
            return merge(out, of({GRAPH}, weaker(module, graph))) if graph is not None else out
        return at_most({OUTPUT, GRAPH, TENSOR}, module)
    return EMPTY


def _parameter_free(ctx: FileContext, module: ast.AST) -> bool:
    """Whether every value ``module`` may hold is a module with no parameter, built here (for a
    parameter: what this file's calls of its function pass): one of torch's PARAMETER_FREE_MODULES, or
    an instance of a class of this file that can hold none (``Definitions.parameter_free_class``)."""
    values: Sequence[ast.AST | None] = [module] if isinstance(module, ast.Call) else passed_values(ctx, module) or [
        v for _, v in ctx.bindings(module)]
    flat: list[ast.AST | None] = []
    while values:
        v, *values = values
        if isinstance(v, ast.IfExp):  # ``Swish() if flag else nn.ReLU()``: each side
            values = [v.body, v.orelse, *values]
        else:
            flat.append(v)
    return bool(flat) and all(isinstance(v, ast.Call) and (
        ctx.call_name(v) in PARAMETER_FREE_MODULES or ctx.makes_parameter_free(v)) for v in flat)


def _attached_input(ctx: FileContext, call: ast.Call, hints: bool) -> Entry | None:
    """The level of ``call``'s most surely graph-attached input (a leaf requiring grad included), or
    None when no input is attached."""
    best = None
    for a in [*call.args, *(kw.value for kw in call.keywords)]:
        e = strongest(kinds_of(ctx, a, hints), (GRAPH, GRAD_LEAF))
        if e is not None and (best is None or e[0] > best[0]):
            best = e
            if e[0] == MUST:
                break
    return best


def _input_graph(ctx: FileContext, call: ast.Call, hints: bool, name: str) -> Entry:
    """How surely a loss computed from ``call``'s inputs is graph-attached: as surely as its most
    surely graph-attached input, and at least UNRESOLVED (the loss is taken to be on the graph)."""
    best: Entry = (UNRESOLVED, (WHY_INPUT, name, GRAPH))
    for a in [*call.args, *(kw.value for kw in call.keywords)]:
        e = strongest(kinds_of(ctx, a, hints), (GRAPH, GRAD_LEAF))
        if e is not None and e[0] > best[0]:
            best = e
            if e[0] == MUST:
                break
    return best


def _callee_text(func: ast.AST) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return "the loss"


def _requires_grad_literal(call: ast.Call) -> bool:
    return any(kw.arg == "requires_grad" and isinstance(kw.value, ast.Constant) and kw.value.value is True
               for kw in call.keywords)


def annotation_kinds(ctx: FileContext, annotation: ast.AST) -> Kinds:
    """Kinds of a value annotated ``model: DDP``, ``opt: torch.optim.Optimizer``, ``x: Tensor``
    (``Optional[...]`` / ``X | None`` / a string annotation look through to the type: the kinds
    then hold on some paths only, None being the other)."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return EMPTY
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return join([annotation_kinds(ctx, annotation.left), annotation_kinds(ctx, annotation.right)], "", WHY_OPTIONAL)
    if isinstance(annotation, ast.Subscript):
        if (ctx.resolve(annotation.value) or "").rsplit(".", 1)[-1] == "Optional":
            return join([annotation_kinds(ctx, annotation.slice), EMPTY], "", WHY_OPTIONAL)
        return EMPTY
    qn = ctx.resolve(annotation)
    if qn is None:
        name = annotation.id if isinstance(annotation, ast.Name) else None
        return _MODULE if name in ctx.module_classes else EMPTY
    last = qn.rsplit(".", 1)[-1]
    if qn in DDP_WRAPPERS:
        return _DDP
    if qn in NN_MODULE_BASES or is_torch_nn_class(qn):
        return _LOSS_FN_MODULE if last.endswith("Loss") else _MODULE
    if qn.startswith("torch.optim.lr_scheduler."):
        return of({SCHEDULER})
    if qn.startswith("torch.optim.") and last[:1].isupper():
        return of({OPTIMIZER})
    if qn in ("torch.Tensor", "torch.FloatTensor", "torch.LongTensor"):
        return _TENSOR
    if qn in ("torch.utils.data.DataLoader",):
        return of({LOADER})
    if qn in ("torch.utils.data.DistributedSampler",):
        return of({SAMPLER, DIST_SAMPLER})
    return EMPTY

