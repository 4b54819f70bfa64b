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

No object here refers to the file's context, so the context, its memo and these sets form no
reference cycle (lint runs with the cyclic garbage collector off).
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING, Iterable

from torchpact.lint.callsites import parameter_sources, passed_values
from torchpact.lint.dataflow import _Iterated, _Unpacked

if TYPE_CHECKING:
    from torchpact.lint.context import FileContext

# Kinds a value can have (strings so rules read naturally: ``"loss" in ctx.kinds(x)``).
MODULE = "module"          # an nn.Module instance (a model, a layer, a DDP wrapper)
DDP = "ddp"                # a DistributedDataParallel / DataParallel / FSDP wrapper
LOSS_FN = "loss_fn"        # a loss module such as nn.CrossEntropyLoss()
LOSS = "loss"              # a loss value (result of a loss call, or what .backward() is called on)
OUTPUT = "output"          # the output of calling a module
GRAPH = "graph"            # a tensor attached to an autograd graph (computed with grad enabled)
GRAD_LEAF = "grad_leaf"    # a leaf tensor that requires grad (requires_grad=True, nn.Parameter)
TENSOR = "tensor"
OPTIMIZER = "optimizer"
SCHEDULER = "scheduler"
SCALER = "scaler"          # torch.amp.GradScaler
LOADER = "loader"          # torch.utils.data.DataLoader
SAMPLER = "sampler"        # DistributedSampler
DIST_SAMPLER = "dist_sampler"
BATCH = "batch"            # what iterating a loader yields
NUMBER = "number"          # a Python number (e.g. from .item())

# How a kind reads in a reason ("`model` is taken for a module by its name").
_PHRASE = {
    MODULE: "a module", DDP: "a DDP/FSDP wrapper", LOSS_FN: "a loss function", LOSS: "a loss",
    OUTPUT: "a model output", GRAPH: "a graph-attached tensor", GRAD_LEAF: "a tensor that requires grad",
    TENSOR: "a tensor", OPTIMIZER: "an optimizer", SCHEDULER: "an LR scheduler", SCALER: "a GradScaler",
    LOADER: "a DataLoader", SAMPLER: "a sampler", DIST_SAMPLER: "a DistributedSampler", BATCH: "a batch",
    NUMBER: "a number",
}

NN_MODULE_BASES = {
    "torch.nn.Module",
    "torch.nn.modules.module.Module",
    "pytorch_lightning.LightningModule",
    "lightning.LightningModule",
    "lightning.pytorch.LightningModule",
    "transformers.PreTrainedModel",
    "transformers.modeling_utils.PreTrainedModel",
}
DDP_WRAPPERS = {
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
    "torch.nn.DataParallel",
    "torch.nn.parallel.DataParallel",
    "torch.distributed.fsdp.FullyShardedDataParallel",
}
FUNCTIONAL_LOSSES = {
    "cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
    "kl_div", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "ctc_loss",
    "poisson_nll_loss", "gaussian_nll_loss", "cosine_embedding_loss", "margin_ranking_loss",
    "hinge_embedding_loss", "multilabel_margin_loss", "multilabel_soft_margin_loss",
    "multi_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "triplet_margin_with_distance_loss",
}
# nn modules without parameters (default arguments): their output is attached to a graph only when
# their input is (tests/proofs/test_autograd_api.py builds each one).
PARAMETER_FREE_MODULES = frozenset(f"torch.nn.{name}" for name in (
    "ReLU", "ReLU6", "LeakyReLU", "RReLU", "ELU", "CELU", "SELU", "GELU", "SiLU", "Mish", "GLU", "Sigmoid",
    "Tanh", "Softmax", "Softmax2d", "Softmin", "LogSoftmax", "LogSigmoid", "Softplus", "Softsign",
    "Softshrink", "Hardshrink", "Hardtanh", "Hardswish", "Hardsigmoid", "Tanhshrink", "Threshold",
    "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout",
    "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "LPPool1d", "LPPool2d",
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d", "Flatten", "Unflatten", "Identity", "Upsample", "UpsamplingNearest2d",
    "UpsamplingBilinear2d", "PixelShuffle", "PixelUnshuffle", "ZeroPad2d", "ConstantPad1d", "ConstantPad2d",
    "ConstantPad3d", "ReflectionPad1d", "ReflectionPad2d", "ReplicationPad1d", "ReplicationPad2d",
    "CosineSimilarity", "PairwiseDistance", "Fold", "Unfold", "LocalResponseNorm",
))
# Methods that return a tensor still attached to the graph of their receiver.
GRAPH_PRESERVING_METHODS = {
    "to", "cuda", "cpu", "float", "double", "half", "bfloat16", "mean", "sum", "view", "reshape",
    "squeeze", "unsqueeze", "flatten", "contiguous", "clone", "abs", "pow", "sqrt", "exp", "log",
    "transpose", "permute", "max", "min", "norm", "type_as", "expand", "mul", "div", "add", "sub",
}
GRAPH_CUTTING_METHODS = {"detach", "item", "tolist", "numpy", "detach_", "requires_grad_"}
MODULE_RETURNING_METHODS = {"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "train",
                            "eval", "requires_grad_", "type", "share_memory", "to_empty"}

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

# ------------------------------------------------------------------ levels
UNRESOLVED, MAY, MUST = 0, 1, 2
# A kind's entry: (level, why). ``why`` is None for MUST, else (format, name, kind) rendered by ``reason``.
Entry = tuple
SURE: Entry = (MUST, None)

_PATHS = "`{name}` holds {kind} on some paths only"
_BRANCH = "{kind} on one side of a conditional expression only"
_HINT = "`{name}` is taken for {kind} by its name"
_FIELD = "`.{name}` is taken for {kind} by its name"
_BACKWARD = "`{name}` is taken for {kind} because `.backward()` is called on it"
_INPUT = "the input of `{name}` is not resolved to {kind}"
_OPTIONAL = "an Optional annotation allows None instead of {kind}"
_CALLERS = "`{name}` receives {kind} from some of this file's calls only"
_OPEN = "`{name}` is called here with {kind}, and other modules may call it with something else"


def reason(why: object) -> str:
    """A reason noted for a level below MUST, as the finding shows it."""
    if isinstance(why, tuple):
        fmt, name, kind = why
        return fmt.format(name=name, kind=_PHRASE.get(kind, kind))
    return str(why)


class Kinds(frozenset):
    """A value's kinds, each with its level: ``levels[kind] = (level, why)``. Asking it a question
    notes nothing (the analysis itself works on these)."""

    __slots__ = ("levels",)
    levels: dict[str, Entry]


def _make(levels: dict[str, Entry]) -> Kinds:
    k = frozenset.__new__(Kinds, levels)
    k.levels = levels
    return k


def of(kinds: Iterable[str], entry: Entry = SURE) -> Kinds:
    """These kinds, all at one level."""
    return _make(dict.fromkeys(kinds, entry))


EMPTY = of(())
_MODULE, _LOSS_FN_MODULE, _DDP = of({MODULE}), of({MODULE, LOSS_FN}), of({MODULE, DDP})
_NUMBER, _TENSOR = of({NUMBER}), of({TENSOR})


def _each(kinds: Iterable[str], level: int, fmt: str, name: str, said: str | None = None) -> Kinds:
    """These kinds at ``level``, each with its reason (one reason for all when ``said`` names the kind
    the reason speaks of)."""
    if said is not None:
        return of(kinds, (level, (fmt, name, said)))
    return _make({k: (level, (fmt, name, k)) for k in kinds})


def pick(src: Kinds, keep: Iterable[str]) -> Kinds:
    """The kinds of ``src`` that are in ``keep``, at their levels."""
    levels = src.levels
    return _make({k: levels[k] for k in keep if k in levels})


def merge(*parts: Kinds) -> Kinds:
    """Every kind any part has, at the strongest level a part gives it (several facts for one value)."""
    parts = tuple(p for p in parts if p)
    if len(parts) < 2:
        return parts[0] if parts else EMPTY
    out = dict(parts[0].levels)
    for p in parts[1:]:
        for k, e in p.levels.items():
            have = out.get(k)
            if have is None or e[0] > have[0]:
                out[k] = e
    return _make(out)


def join(alternatives: list[Kinds], name: str, fmt: str = _PATHS) -> Kinds:
    """The kinds over alternative paths: MUST where every path has the kind at MUST; MAY where some
    path has it (at MAY or better) and another lacks it or is less sure; UNRESOLVED otherwise."""
    live = [a for a in alternatives if a is not alternatives[0]]
    if not live:
        return alternatives[0] if alternatives else EMPTY
    present: set[str] = set()
    for a in alternatives:
        present.update(a)
    out: dict[str, Entry] = {}
    for k in present:
        weakest = best = None
        missing = False
        for a in alternatives:
            e = a.levels.get(k)
            if e is None:
                missing = True
                continue
            if weakest is None or e[0] < weakest[0]:
                weakest = e
            if best is None or e[0] > best[0]:
                best = e
        assert weakest is not None and best is not None
        if not missing and weakest[0] == MUST:
            out[k] = SURE
        elif best[0] >= MAY:
            out[k] = weakest if not missing and weakest[0] == MAY else (MAY, (fmt, name, k))
        else:
            out[k] = weakest
    return _make(out)


def _at_most(kinds: Iterable[str], entry: Entry | None) -> Kinds:
    """New kinds derived from a fact with ``entry``: they inherit its level."""
    return of(kinds, entry or SURE)


def _strongest(src: Kinds, among: Iterable[str]) -> Entry | None:
    best = None
    for k in among:
        e = src.levels.get(k)
        if e is not None and (best is None or e[0] > best[0]):
            best = e
    return best


def _weaker(a: Entry, b: Entry) -> Entry:
    return a if a[0] <= b[0] else b


# ------------------------------------------------------------------ what rules get
class Recorder:
    """The evidence noted while one rule checks one node: the weakest level of the answers it relied
    on, and why. The engine resets it before each ``rule.check(node)`` and reads it at each hit."""

    __slots__ = ("level", "reasons")

    def __init__(self) -> None:
        self.level = MUST
        self.reasons: list[object] = []

    def note(self, level: int, why: object = None) -> None:
        if level < MUST:
            if level < self.level:
                self.level = level
            if why is not None and why not in self.reasons:
                self.reasons.append(why)

    def reset(self) -> None:
        self.level = MUST
        self.reasons = []

    def rendered(self) -> list[str]:
        return [reason(w) for w in self.reasons]


class Noted(Kinds):
    """The kinds a rule gets from ``ctx.kinds``: a "yes" to a question notes its level."""

    __slots__ = ("recorder",)

    def __contains__(self, kind: object) -> bool:
        e = self.levels.get(kind)  # type: ignore[arg-type]
        if e is None:
            return False
        if e[0] < MUST:
            self.recorder.note(e[0], e[1])
        return True

    def __bool__(self) -> bool:
        levels = self.levels
        if not levels:
            return False
        best = max(levels.values(), key=_level)
        if best[0] < MUST:
            self.recorder.note(best[0], best[1])
        return True

    def _view(self, kinds: Iterable[str]) -> "Noted":
        levels = self.levels
        return noted(_make({k: levels.get(k, SURE) for k in kinds}), self.recorder)

    def __and__(self, other: object) -> "Noted":  # type: ignore[override]
        return self._view(frozenset.__and__(self, other))  # type: ignore[operator]

    __rand__ = __and__

    def __sub__(self, other: object) -> "Noted":  # type: ignore[override]
        return self._view(frozenset.__sub__(self, other))  # type: ignore[operator]

    def __or__(self, other: object) -> "Noted":  # type: ignore[override]
        return self._view(frozenset.__or__(self, other))  # type: ignore[operator]

    __ror__ = __or__

    def isdisjoint(self, other: Iterable[str]) -> bool:
        return not self & frozenset(other)


def _level(entry: Entry) -> int:
    return entry[0]


def noted(raw: Kinds, recorder: Recorder) -> Noted:
    """``raw`` as rules see it: questions note into ``recorder``."""
    k = frozenset.__new__(Noted, raw)
    k.levels = raw.levels
    k.recorder = recorder
    return k


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
        return _at_most({BATCH, TENSOR}, inner.levels[LOADER]) if LOADER in inner else EMPTY
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
        return join([kinds_of(ctx, expr.body, hints), kinds_of(ctx, expr.orelse, hints)], "", _BRANCH)  # type: ignore[attr-defined]
    if t is ast.Await:
        return kinds_of(ctx, expr.value, hints)  # type: ignore[attr-defined]
    if t is ast.Constant and isinstance(expr.value, (int, float)):  # type: ignore[attr-defined]
        return _NUMBER
    return EMPTY


def _arithmetic(both: Kinds) -> Kinds:
    """``a + b``, ``-a``: graph-attached where an operand is (a leaf requiring grad included)."""
    derived = pick(both, (LOSS, GRAPH, TENSOR, OUTPUT))
    leaf = both.levels.get(GRAD_LEAF)
    return merge(derived, _at_most({GRAPH, TENSOR}, leaf)) if leaf is not None else derived


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
        out = merge(out, _each((LOSS, TENSOR, GRAPH), MAY, _BACKWARD, name, LOSS))
    if isinstance(expr, ast.Attribute) and expr.attr == "loss" and not binds:
        out = merge(out, _each((LOSS, TENSOR), UNRESOLVED, _FIELD, "loss", LOSS))
        if kinds_of(ctx, expr.value, hints) & {OUTPUT, GRAPH}:
            # ``outputs.loss`` of a model called with grad enabled
            out = merge(out, _each((GRAPH,), UNRESOLVED, _FIELD, "loss", LOSS))
    if not (out - {TENSOR}):
        annotated = [_annotation_of(ctx, owner, value) for owner, value in binds]
        if any(annotated):
            out = merge(out, join(annotated, name))
    if hints and not (out - {TENSOR}) and all(v is None for _, v in binds) and not _FACTORY_NAME.match(name):
        for pattern, kinds in _NAME_HINTS:
            if pattern.search(name):
                out = merge(out, _each(kinds, UNRESOLVED, _HINT, name))
    if isinstance(expr, ast.Attribute) and expr.attr == "module":
        ddp = kinds_of(ctx, expr.value, hints).levels.get(DDP)
        if ddp is not None:
            out = merge(out, _at_most({MODULE}, ddp))
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
        if GRAPH in k and ctx.grad_disabled(value):
            k = pick(k, k - {GRAPH})
        alternatives.append(k)
    out = join(alternatives, arg.arg, _CALLERS) if len(alternatives) > 1 else alternatives[0]
    if not sources.closed and out:
        out = _make({k: e if e[0] <= MAY else (MAY, (_OPEN, sources.function, k)) for k, e in out.levels.items()})
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
                e = _strongest(kinds_of(ctx, a, hints), (GRAPH, GRAD_LEAF))
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
            tensor = _strongest(recv, (TENSOR, GRAPH, LOSS, OUTPUT, GRAD_LEAF))
            return _at_most({TENSOR}, tensor) if tensor is not None else EMPTY
        if attr in GRAPH_PRESERVING_METHODS and recv & {GRAPH, LOSS, OUTPUT, GRAD_LEAF, TENSOR}:
            keep = pick(recv, (LOSS, OUTPUT, GRAPH, TENSOR))
            leaf = recv.levels.get(GRAD_LEAF)
            return merge(keep, _at_most({GRAPH, TENSOR}, leaf)) if leaf is not None else keep
    callee = kinds_of(ctx, func, hints)
    loss_fn = callee.levels.get(LOSS_FN)
    if loss_fn is not None:
        graph = _input_graph(ctx, call, hints, _callee_text(func))
        return merge(_at_most({LOSS, TENSOR}, loss_fn), of({GRAPH}, _weaker(loss_fn, graph)))
    module = callee.levels.get(MODULE)
    if module is not None:
        if _parameter_free(ctx, func):
            # no parameter: the output is on a graph only as surely as an input is
            graph = _attached_input(ctx, call, hints)
            out = _at_most({OUTPUT, TENSOR}, module)
            return merge(out, of({GRAPH}, _weaker(module, graph))) if graph is not None else out
        return _at_most({OUTPUT, GRAPH, TENSOR}, module)
    return EMPTY


def _parameter_free(ctx: FileContext, module: ast.AST) -> bool:
    """Whether every value ``module`` may hold is one of PARAMETER_FREE_MODULES, built here (for a
    parameter: what this file's calls of its function pass)."""
    values = [module] if isinstance(module, ast.Call) else passed_values(ctx, module) or [
        v for _, v in ctx.bindings(module)]
    return bool(values) and all(isinstance(v, ast.Call) and ctx.call_name(v) in PARAMETER_FREE_MODULES
                                for v in values)


def _attached_input(ctx: FileContext, call: ast.Call, hints: bool) -> Entry | None:
    """The level of ``call``'s most surely graph-attached input (a leaf requiring grad included), or
    None when no input is attached."""
    best = None
    for a in [*call.args, *(kw.value for kw in call.keywords)]:
        e = _strongest(kinds_of(ctx, a, hints), (GRAPH, GRAD_LEAF))
        if e is not None and (best is None or e[0] > best[0]):
            best = e
            if e[0] == MUST:
                break
    return best


def _input_graph(ctx: FileContext, call: ast.Call, hints: bool, name: str) -> Entry:
    """How surely a loss computed from ``call``'s inputs is graph-attached: as surely as its most
    surely graph-attached input, and at least UNRESOLVED (the loss is taken to be on the graph)."""
    best: Entry = (UNRESOLVED, (_INPUT, name, GRAPH))
    for a in [*call.args, *(kw.value for kw in call.keywords)]:
        e = _strongest(kinds_of(ctx, a, hints), (GRAPH, GRAD_LEAF))
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
        return join([annotation_kinds(ctx, annotation.left), annotation_kinds(ctx, annotation.right)], "", _OPTIONAL)
    if isinstance(annotation, ast.Subscript):
        if (ctx.resolve(annotation.value) or "").rsplit(".", 1)[-1] == "Optional":
            return join([annotation_kinds(ctx, annotation.slice), EMPTY], "", _OPTIONAL)
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


def is_torch_nn_class(qn: str) -> bool:
    parts = qn.split(".")
    return (len(parts) >= 3 and parts[0] == "torch" and parts[1] == "nn" and parts[-1][:1].isupper()
            and parts[2] not in ("functional", "init", "utils"))
