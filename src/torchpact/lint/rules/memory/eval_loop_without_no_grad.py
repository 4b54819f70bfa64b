from __future__ import annotations

import ast
import re
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import LOSS_FN, MODULE, FileContext, is_const
from torchpact.lint.rule import Invalid, Hit, Rule
from torchpact.lint.rules.memory._training_loops import is_update_call

# Hooks that PyTorch Lightning already runs under no_grad / inference_mode.
_LIGHTNING_EVAL_HOOKS = re.compile(
    r"^((validation|test|predict)_step(_end)?|(validation|test)_epoch_end|"
    r"on_(validation|test|predict)_(batch|epoch)_(start|end))$")
_GRAD_ENABLERS = {"torch.enable_grad", "torch.autograd.enable_grad"}
_GRAD_SETTERS = {"torch.set_grad_enabled", "torch.autograd.set_grad_enabled"}


class EvalLoopWithoutNoGrad(Rule):
    """An evaluation loop runs the model with autograd on: `model.eval()` does not disable gradients.

    ## What it does
    Flags a loop that runs a model forward after `model.eval()` (or `model.train(False)`) in the
    same function or script, when nothing in or after the loop back-propagates, steps an optimizer
    or asks for gradients, and the forward is not under `torch.no_grad()` / `torch.inference_mode()`
    — neither as a block, nor as a decorator, nor around a call of the function elsewhere in the
    file, nor by `torch.set_grad_enabled(False)`. Lightning's `validation_step` / `test_step` /
    `predict_step` hooks (run under no_grad by Lightning) and models frozen with
    `requires_grad_(False)` are not flagged. The outermost such loop is reported once.

    A graph is wasted only when nothing needs it. A forward in an `except` handler whose `try` first
    ran the same call under `no_grad` / `inference_mode` (`try: with torch.no_grad(): out =
    model(x)` / `except RuntimeError: out = model(x)`) runs with autograd on only when the no-grad
    attempt failed — a model whose forward takes gradients itself (`torch.autograd.grad` of a
    penalty raises `element 0 of tensors does not require grad` under `no_grad`) — so it is the
    deliberate fallback, not a graph built for nothing, and is not flagged.

    ## Why is this bad?
    `eval()` only switches dropout and batch-norm to inference behaviour. With gradients enabled,
    every forward on torch 2.13 still builds an autograd graph: the outputs carry a `grad_fn` and
    `requires_grad=True`, and every activation the backward would need is saved (4 saved tensors for
    a 2-layer MLP in the proof; 0 under `no_grad`). That is extra memory and time per batch for
    gradients that are never used. If the outputs are collected across batches
    (`preds.append(out)`), every batch's activations stay alive until the loop ends (five collected
    batches kept all 20 of their saved tensors in the proof) — a common cause of out-of-memory
    errors in validation that never happen in training.

    ## Fix safety
    No autofix: wrapping the loop changes its indentation, and outputs that no longer require grad
    could matter to code torchpact cannot see. Wrap the loop in `with torch.no_grad():`, or
    decorate the function with `@torch.no_grad()` (`torch.inference_mode()` is faster still, but its
    tensors can never be used in autograd later).
    """

    code = "TP103"
    category = Category.MEMORY
    severity = Severity.WARNING
    requires = (
        "the model is resolved to a module through dataflow, switched to eval mode before the loop",
        "nothing in or after the loop asks for gradients, and no `no_grad` / `inference_mode` covers the "
        "forward",
    )
    message = ("the model runs forward in an evaluation loop with gradients enabled: `.eval()` does not "
               "disable autograd, so every batch builds a graph and saves its activations for nothing")
    fix_hint = ("wrap the loop in `with torch.no_grad():` (or `torch.inference_mode()`), or decorate "
                "the function with `@torch.no_grad()`")
    nodes = (ast.For, ast.AsyncFor, ast.While)
    triggers = ("eval", "train(False)")
    facts = ("eval-does-not-disable-grad",)

    valid = [
        """
import torch
def evaluate(model, loader):
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
    return correct
""",
        """
import torch
@torch.inference_mode()
def predict(model, loader):
    model.eval()
    outputs = []
    for x in loader:
        outputs.append(model(x))
    return outputs
""",
        """
import torch
def validate(model, loader):
    model.eval()
    total = 0.0
    for x, y in loader:
        total += torch.nn.functional.mse_loss(model(x), y).item()
    return total

for epoch in range(10):
    train_one_epoch(model, loader)
    with torch.no_grad():
        validate(model, val_loader)
""",
        """
import torch
def saliency(model, loader):
    model.eval()
    maps = []
    for x in loader:
        x.requires_grad_(True)
        model(x).max().backward()
        maps.append(x.grad.abs())
    return maps
""",
        """
import torch.nn as nn
model = nn.Linear(4, 2)
for epoch in range(3):
    model.eval()
    evaluate(model)
    model.train()
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
""",
        """
import torch
teacher.eval()
teacher.requires_grad_(False)
for x in loader:
    soft = teacher(x)
    store(soft)
""",        """
import torch
class Evaluator:
    def eval_epoch(self, batches):
        self.net.eval()
        total = 0.0
        for inputs in batches:
            try:
                with torch.inference_mode():
                    out = self.net(inputs, split="eval")
            except RuntimeError:
                out = self.net(inputs, split="eval")
            total += out.loss.item()
        return total
""",
        """
import torch
def score(model, loader):
    model.eval()
    preds = []
    for x, _ in loader:
        try:
            with torch.no_grad():
                y = model.forward(x)
        except (RuntimeError, TypeError) as err:
            if "grad" not in str(err):
                raise
            y = model.forward(x).detach()
        preds.append(y)
    return preds
""",
        """
import torch
from torch import nn
def drain(net: nn.Module, queue):
    net.eval()
    while queue:
        batch = queue.pop()
        try:
            with torch.set_grad_enabled(False):
                net(batch)
        except Exception:
            net(batch)
""",
        """
import torch
class Runner:
    def validate(self, loader):
        self.model.train(False)
        losses = []
        for x in loader:
            try:
                with torch.no_grad():
                    loss = self.model(inputs=x, epoch=0)
            except RuntimeError:
                loss = self.model(inputs=x, epoch=0)
            losses.append(float(loss))
        return losses
""",
        """
import torch
def evaluate(model, loader, retry):
    model.eval()
    for step, x in enumerate(loader):
        try:
            with torch.no_grad():
                model(x)
        except RuntimeError:
            if retry:
                model(x)
""",
    ]
    invalid = [
        Invalid("""
import torch
def evaluate(model, loader):
    model.eval()
    preds = []
    for x, y in loader:
        preds.append(model(x))
    return torch.cat(preds)
""", severity=Severity.INFO),
        """
import torch.nn as nn
from torch import optim
net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
opt = optim.Adam(net.parameters())
for x, y in train_loader:
    loss = nn.functional.cross_entropy(net(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
net.eval()
correct = 0
for epoch_batch in val_loader:
    for x, y in epoch_batch:
        correct += (net(x).argmax(1) == y).sum().item()
""",
        Invalid("""
import torch
class Runner:
    def test(self, loader):
        self.model.train(False)
        results = []
        for batch in loader:
            with torch.autocast("cpu"):
                results.append(self.model.forward(batch).float())
        return results
""", severity=Severity.INFO),        Invalid("""
import torch
def score(model, teacher, loader):
    model.eval()
    preds = []
    for x, _ in loader:
        try:
            y = model(x)
        except RuntimeError:
            y = model(x.float())
        preds.append(y)
    for x, _ in loader:
        try:
            with torch.no_grad():
                y = teacher(x)
        except RuntimeError:
            y = model(x)
        preds.append(y)
    return preds
""", count=2, severity=Severity.INFO),
        Invalid("""
import torch
def validate(model, loader):
    model.eval()
    losses = []
    for x in loader:
        try:
            with torch.no_grad():
                loss = model(x)
        except RuntimeError:
            continue
        else:
            loss = model(x)
        losses.append(loss)
    return losses
""", severity=Severity.INFO),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        forward = self._qualifies(node, ctx)
        if forward is None:
            return
        if any(self._qualifies(outer, ctx) is not None for outer in ctx.enclosing_loops(node)):
            return  # the outermost evaluation loop is the one reported
        end = node.iter if isinstance(node, (ast.For, ast.AsyncFor)) else node.test  # type: ignore[attr-defined]
        yield self.hit(node, subject=ctx.locator.source(_callee(forward)), end_node=end)

    def _qualifies(self, loop: ast.AST, ctx: FileContext) -> ast.Call | None:
        """The loop's first forward run with gradients enabled, when the loop is an evaluation loop."""
        return ctx.remember(("eval_loop", id(loop)), lambda: self._evaluate(loop, ctx))  # type: ignore[return-value]

    def _evaluate(self, loop: ast.AST, ctx: FileContext) -> ast.Call | None:
        scope = ctx.scope(loop)
        first_eval = _first_eval_switch(scope, ctx)
        if first_eval is None or first_eval > (loop.end_lineno or 0, loop.end_col_offset or 0):  # type: ignore[attr-defined]
            return None  # no .eval() before or in it: the cheap test first, the dataflow only if needed
        body = [*loop.body, *([loop.test] if isinstance(loop, ast.While) else [])]  # type: ignore[attr-defined]
        forwards = [n for n in ctx.walk_scope(body)
                    if _is_forward(n, ctx) and not ctx.grad_disabled(n) and not _retry_of_no_grad_forward(n, loop, ctx)]
        if not forwards:
            return None
        fn = ctx.enclosing_function(loop)
        if fn is not None and (_LIGHTNING_EVAL_HOOKS.match(fn.name) and ctx.enclosing_class(fn) is not None):
            return None
        if _mode_before(forwards[0], scope, ctx) != "eval" or _switches_inside(loop, ctx):
            return None
        if ctx.reaches([loop], lambda n: _asks_for_grad(n, ctx)) is not None:
            return None
        start = (loop.lineno, loop.col_offset)
        scope_body = scope.body if isinstance(getattr(scope, "body", None), list) else [scope]
        for n in ctx.walk_scope(scope_body):
            if _asks_for_grad(n, ctx) and (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)) >= start:
                return None  # gradients of what the loop computed are taken later
            if _enables_grad_on_inputs(n, ctx):
                return None
        if _grad_off_globally(ctx) or _frozen(ctx):
            return None
        if fn is not None and _called_without_grad(fn, ctx):
            return None
        return forwards[0]


def _retry_of_no_grad_forward(forward: ast.Call, loop: ast.AST, ctx: FileContext) -> bool:
    """``try: with torch.no_grad(): out = model(x)`` / ``except RuntimeError: out = model(x)``: the forward
    with autograd on runs only when the same call failed without it, i.e. when the forward needs a graph
    (it takes gradients itself)."""
    called = ctx.locator.source(_callee(forward))
    for anc in ctx.ancestors(forward):
        if anc is loop:
            return False
        if isinstance(anc, ast.ExceptHandler):
            attempt = ctx.parent(anc)
            if isinstance(attempt, ast.Try) and any(
                    isinstance(n, ast.Call) and ctx.grad_disabled(n) and _is_forward(n, ctx)
                    and ctx.locator.source(_callee(n)) == called for n in ctx.walk_scope(attempt.body)):
                return True
    return False


def _callee(call: ast.Call) -> ast.expr:
    func = call.func
    return func.value if isinstance(func, ast.Attribute) and func.attr == "forward" else func


def _is_forward(node: ast.AST, ctx: FileContext) -> bool:
    if not isinstance(node, ast.Call):
        return False
    kinds = ctx.kinds(_callee(node))
    return MODULE in kinds and LOSS_FN not in kinds


def _position(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def _mode_switch(node: ast.AST) -> str | None:
    """'eval' for ``x.eval()`` / ``x.train(False)``, 'train' for any other ``x.train(...)``."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    if node.func.attr == "eval" and not node.args and not node.keywords:
        return "eval"
    if node.func.attr == "train" and len(node.args) + len(node.keywords) <= 1:
        arg = node.args[0] if node.args else node.keywords[0].value if node.keywords else None
        return "eval" if is_const(arg, False) else "train"
    return None


def _mode_before(forward: ast.Call, scope: ast.AST, ctx: FileContext) -> str | None:
    body = scope.body if isinstance(getattr(scope, "body", None), list) else [scope]
    last, where = None, (0, 0)
    for n in ctx.walk_scope(body):
        mode = _mode_switch(n)
        if mode is not None and where <= _position(n) < _position(forward):
            last, where = mode, _position(n)
    return last


def _first_eval_switch(scope: ast.AST, ctx: FileContext) -> tuple[int, int] | None:
    """Where the scope first switches something to eval mode (memoised per scope)."""
    key = ("first_eval_switch", id(scope))
    if key not in ctx.memo:
        body = scope.body if isinstance(getattr(scope, "body", None), list) else [scope]
        ctx.memo[key] = min((_position(n) for n in ctx.walk_scope(body) if _mode_switch(n) == "eval"), default=None)
    return ctx.memo[key]  # type: ignore[return-value]


def _switches_inside(loop: ast.AST, ctx: FileContext) -> bool:
    return any(_mode_switch(n) == "train" for n in ctx.walk_scope(loop.body))  # type: ignore[attr-defined]


def _asks_for_grad(node: ast.AST, ctx: FileContext) -> bool:
    if is_update_call(node, ctx):
        return True
    if isinstance(node, ast.Call):
        name = ctx.call_name(node) or ""
        if name in ("torch.autograd.grad", "torch.autograd.functional.jacobian", "torch.autograd.functional.hessian"):
            return True
        if name in _GRAD_ENABLERS or (name in _GRAD_SETTERS and not (node.args and is_const(node.args[0], False))):
            return True
    return False


def _enables_grad_on_inputs(node: ast.AST, ctx: FileContext) -> bool:
    """``x.requires_grad_()`` / ``x.requires_grad = True`` / ``requires_grad=True``: gradients wanted."""
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute) and node.func.attr == "requires_grad_":
            arg = node.args[0] if node.args else None
            return arg is None or not is_const(arg, False)
        return any(k.arg == "requires_grad" and not is_const(k.value, False) for k in node.keywords)
    if isinstance(node, ast.Assign):
        return (any(isinstance(t, ast.Attribute) and t.attr == "requires_grad" for t in node.targets)
                and not is_const(node.value, False))
    return False


def _grad_off_globally(ctx: FileContext) -> bool:
    for call in ctx.nodes(ast.Call):
        if ctx.call_name(call) in _GRAD_SETTERS and call.args and is_const(call.args[0], False):
            if isinstance(ctx.parent(call), ast.Expr):
                return True
    return False


def _frozen(ctx: FileContext) -> bool:
    """Parameters frozen somewhere in the file: then the forward builds no graph."""
    for call in ctx.nodes(ast.Call):
        if (isinstance(call.func, ast.Attribute) and call.func.attr == "requires_grad_" and call.args
                and is_const(call.args[0], False)):
            return True
    for assign in ctx.nodes(ast.Assign):
        if (any(isinstance(t, ast.Attribute) and t.attr == "requires_grad" for t in assign.targets)
                and is_const(assign.value, False)):
            return True
    return False


def _called_without_grad(fn: ast.FunctionDef | ast.AsyncFunctionDef, ctx: FileContext) -> bool:
    """Some call of ``fn`` in this file runs under no_grad / inference_mode."""
    for call in ctx.nodes(ast.Call):
        func = call.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name == fn.name and ctx.grad_disabled(call):
            return True
    return False
