"""Whether a DataLoader's batches are consumed by training steps (TP920's condition).

What ``num_workers=0`` costs is training throughput: the accelerator idles between optimizer steps
while the training process loads the next batch. A loader consumed in this file only by loops that
take no training step — a prediction, embedding or feature-extraction pass (forwards, under
``no_grad`` or not, whose outputs are collected), a loop that collects or compares batches
(``batches.append(b)``, ``assert b.shape == ...``) — or only by single fetches
(``next(iter(loader))``), or never used at all, costs no training step anything. A loop takes a
training step when its body (and the functions of this file it calls) back-propagates or steps an
optimizer; one that calls code lint cannot see into (not a module's forward or inference method,
not bookkeeping, not under ``no_grad``) may, and counts as ``unresolved``. A loader that leaves the
code lint sees (returned, stored on an object, handed to a trainer or another function) may be
consumed by a training loop elsewhere, and counts as ``unresolved`` too.
"""

from __future__ import annotations

import ast

from torchpact.findings import Evidence
from torchpact.lint.context import DDP, LOSS_FN, MODULE, FileContext
from torchpact.lint.rules._tensors import TENSOR_METHODS
from torchpact.lint.rules.memory._training_loops import is_update_call
from torchpact.lint.rules.training._util import reaches

# Wrappers whose iteration iterates the loader (``for i, b in enumerate(tqdm(loader))``).
_ITERATING = frozenset({"enumerate", "zip", "tqdm", "tqdm.tqdm", "tqdm.auto.tqdm", "itertools.islice"})
# Calls that do no work worth overlapping with loading: bookkeeping, comparing, printing.
_CHEAP_FUNCTIONS = frozenset({
    "len", "print", "isinstance", "list", "tuple", "dict", "set", "sorted", "range", "enumerate", "zip",
    "str", "int", "float", "bool", "type", "next", "iter", "min", "max", "sum", "any", "all", "repr",
    "getattr", "hasattr", "id", "torch.equal", "torch.allclose", "torch.is_tensor", "numpy.allclose",
    "numpy.array_equal",
})
_CHEAP_METHODS = frozenset({
    "append", "extend", "add", "items", "keys", "values", "tolist", "item", "size", "dim", "numel", "format",
    "startswith", "endswith", "join", "split", "get", "equal", "copy_", "to", "cpu", "cuda", "numpy",
    "debug", "info", "warning", "write", "log", "set_postfix", "set_description", "update",
    "clear", "pop", "insert", "remove", "setdefault", "sort", "reverse",
})
# Methods of a module that run it for inference, not training.
_INFERENCE_METHODS = frozenset({
    "forward", "predict", "predict_proba", "generate", "encode", "decode", "embed", "explain", "inference",
    "infer", "sample", "evaluate", "test_step", "val_step", "validation_step", "predict_step", "eval",
})
_FORWARDS = frozenset({MODULE, DDP, LOSS_FN})  # a set's own test: a "no" to "is it training?" notes nothing
# Predicates and checks by their name: ``is_tensor_like(b)``, ``check_batch(b)``.
_PREDICATE_PREFIXES = ("is_", "has_", "assert", "check_")


def callee(call: ast.AST, ctx: FileContext) -> str | None:
    """The resolved name of a call's callee, or the bare name of a builtin / unimported function."""
    if not isinstance(call, ast.Call):
        return None
    name = ctx.call_name(call)
    if name is None and isinstance(call.func, ast.Name):
        return call.func.id
    return name


def consumed_with_work(loader: ast.Call, ctx: FileContext) -> bool:
    """Whether the batches of the DataLoader built by ``loader`` may meet training steps (see above).
    A loader whose consumer lint cannot see counts, with an ``unresolved`` note."""
    target = _bound_name(loader, ctx)
    if target is None:
        loop = _iterating_loop(loader, ctx)
        if loop is not None:
            return _works(loop, ctx)
        if _single_fetch_or_size(loader, ctx):
            return False
        ctx.note(Evidence.UNRESOLVED, "the code that iterates the loader is not in this file")
        return True
    name, scope = target
    reads = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
    escaped = False
    for read in reads:
        loop = _iterating_loop(read, ctx)
        if loop is not None:
            if _works(loop, ctx):
                return True
            continue
        if _single_fetch_or_size(read, ctx):
            continue
        escaped = True
    if escaped:
        ctx.note(Evidence.UNRESOLVED, f"`{name}` is handed to code that may iterate it elsewhere")
    return escaped


def _bound_name(loader: ast.Call, ctx: FileContext) -> tuple[str, ast.AST] | None:
    """``name = DataLoader(...)`` (also one side of a conditional): the name and the scope to search."""
    value: ast.AST = loader
    parent = ctx.parent(loader)
    while isinstance(parent, ast.IfExp) and value is not parent.test:
        value, parent = parent, ctx.parent(parent)
    if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is value:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        if len(targets) == 1 and isinstance(targets[0], ast.Name):
            return targets[0].id, ctx.scope(parent)
    return None


def _iterating_loop(expr: ast.AST, ctx: FileContext) -> ast.AST | None:
    """The ``for`` loop (or comprehension) that iterates ``expr``, directly or through a wrapper."""
    child = expr
    parent = ctx.parent(expr)
    while isinstance(parent, ast.Call) and child in parent.args and callee(parent, ctx) in _ITERATING:
        child, parent = parent, ctx.parent(parent)
    if isinstance(parent, (ast.For, ast.AsyncFor)) and parent.iter is child:
        return parent
    if isinstance(parent, ast.comprehension) and parent.iter is child:
        return ctx.parent(parent)
    return None


def _single_fetch_or_size(read: ast.expr, ctx: FileContext) -> bool:
    """``len(loader)``, ``next(iter(loader))``, ``loader.dataset`` / ``loader.batch_size``: one batch at most."""
    parent = ctx.parent(read)
    if isinstance(parent, ast.Attribute) and parent.attr in ("dataset", "batch_size", "sampler", "num_workers"):
        return True
    if isinstance(parent, ast.Call) and read in parent.args:
        name = callee(parent, ctx)
        if name == "len":
            return True
        if name == "iter":
            outer = ctx.parent(parent)
            return callee(outer, ctx) == "next" and parent in outer.args
    return False


def _works(loop: ast.AST, ctx: FileContext) -> bool:
    """Whether an iteration of ``loop`` takes, or may take, a training step (see the module docstring)."""
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        roots: list = list(loop.body)
    else:  # a comprehension: its element and conditions run per batch
        roots = [loop.elt if hasattr(loop, "elt") else loop]  # type: ignore[attr-defined]
        roots += [c for g in loop.generators for c in g.ifs]  # type: ignore[attr-defined]
    if any(reaches(ctx, root, lambda n: is_update_call(n, ctx)) is not None for root in roots):
        return True
    unseen = next((found for found in (reaches(ctx, root, lambda n: _may_train(n, ctx)) for root in roots)
                   if found is not None), None)
    if unseen is None:
        return False
    ctx.note(Evidence.UNRESOLVED, f"each batch reaches `{ctx.locator.source(unseen)[:60]}`, code lint cannot "
                                  "see into, which may take a training step")
    return True


def _may_train(node: ast.AST, ctx: FileContext) -> bool:
    """A call that may back-propagate or step an optimizer: not a forward, not bookkeeping, grad on."""
    if not isinstance(node, ast.Call) or ctx.grad_disabled(node):
        return False
    func = node.func
    name = callee(node, ctx)
    if name in _CHEAP_FUNCTIONS or (name or "").startswith(("torch.testing.", "numpy.testing.")):
        return False
    if isinstance(func, ast.Attribute) and (func.attr in _CHEAP_METHODS or func.attr in TENSOR_METHODS
                                            or func.attr.startswith("assert")):
        return False  # bookkeeping, or a tensor method: neither steps an optimizer
    last = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if last.startswith(_PREDICATE_PREFIXES):
        return False
    if isinstance(func, ast.Name) and func.id in ctx.functions:
        return False  # followed into by ``reaches``
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self" \
            and func.attr in ctx.functions:
        return False
    if (name or "").startswith("torch.") or not _FORWARDS.isdisjoint(ctx.kinds(func)):
        return False  # a forward, a loss or a torch function computes; it does not step anything
    if isinstance(func, ast.Attribute) and func.attr in _INFERENCE_METHODS:
        return False
    return not _called_in_eval_mode(func, ctx)


def _called_in_eval_mode(func: ast.expr, ctx: FileContext) -> bool:
    """``self.network(x)`` / ``self.network.forward_masks(x)`` in a function that called ``self.network.eval()``:
    a module put in eval mode for an inference pass (its class may be of another package)."""
    scope = ctx.enclosing_function(func)
    if scope is None:
        return False
    key = ("eval_mode_objects", id(scope))
    objects = ctx.memo.get(key)
    if objects is None:
        objects = ctx.memo[key] = frozenset(
            ctx.locator.source(n.func.value) for n in ctx.walk_scope(scope.body)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and (n.func.attr == "eval" and not n.args or n.func.attr == "train" and _is_false(n)))
    called = func.value if isinstance(func, ast.Attribute) and ctx.locator.source(func) not in objects else func
    return ctx.locator.source(called) in objects  # type: ignore[operator]


def _is_false(call: ast.Call) -> bool:
    return len(call.args) == 1 and isinstance(call.args[0], ast.Constant) and call.args[0].value is False
