from __future__ import annotations

import ast
import re
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import LOSS, LOSS_FN, MODULE, OUTPUT, FileContext, keyword
from torchpact.lint.rule import Hit, Invalid, Rule, last_names
from torchpact.lint.rules.autograd._grad import MAYBE_SELF, PASS_METHODS
from torchpact.lint.rules.autograd._util import creates_grad_leaf, is_torch_factory, name_key, scope_body

AUTOGRAD_ENTRY = {"torch.autograd.backward", "torch.autograd.grad"}
# ``accelerator.backward(loss)``, ``fabric.backward(loss)``, ``self.manual_backward(loss)``,
# deepspeed's ``model_engine.backward(loss)``: the tensor is the first argument.
WRAPPER_RECEIVER = re.compile(r"(accelerator|fabric|strategy|trainer|precision|engine|model|self)$", re.I)
GRAD_ENABLERS = {"torch.enable_grad", "torch.autograd.enable_grad", "torch.set_grad_enabled",
                 "torch.autograd.set_grad_enabled", "torch.inference_mode"}


class BackwardOfNoGradResult(Rule):
    """`backward()` is called on a value computed under `torch.no_grad()` / `torch.inference_mode()`.

    ## What it does
    Flags `loss.backward()`, `torch.autograd.backward(loss)`, `torch.autograd.grad(loss, ...)` (and
    `accelerator.backward(loss)`-style wrappers) when `loss` was computed — by a model, a loss
    function, a torch function or tensor arithmetic — only inside a `torch.no_grad()` /
    `torch.inference_mode()` block or a function decorated with one, without `torch.enable_grad()`
    in between; also `criterion(out, y).backward()` written directly inside such a block.

    ## Why is this bad?
    Nothing computed with gradients disabled is recorded, so the value has no `grad_fn` and does not
    require grad. On torch 2.13 `backward()` raises
    `RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn` — the
    same message under `no_grad()` and under `inference_mode()`, and for `torch.autograd.grad`.
    Only where the value is computed matters: calling `backward()` inside `no_grad()` on a loss
    whose graph was built outside it works (the gradients are computed and accumulated), so that
    is not flagged.

    ## Fix safety
    No autofix: compute the loss outside the `no_grad` block (or under `torch.enable_grad()`).
    If the block is an evaluation loop, the `backward()` call probably does not belong there.
    """

    code = "TP206"
    category = Category.AUTOGRAD
    severity = Severity.ERROR
    facts = ("backward-of-no-grad-result-raises",)
    message = ("backward on a value computed with gradients disabled: it has no grad_fn and torch raises "
               "'element 0 of tensors does not require grad and does not have a grad_fn'")
    fix_hint = "compute the loss outside `torch.no_grad()` / `torch.inference_mode()` (or under `torch.enable_grad()`)"
    nodes = (ast.Call,)
    calls = last_names(AUTOGRAD_ENTRY) | {"backward", "manual_backward"}
    triggers = ("no_grad", "inference_mode")
    requires = (
        "every definition of the back-propagated value reaching the call is made with gradients disabled",
        "each is a fresh computation: a torch function, arithmetic, or a call of a value resolved to a "
        "module or loss function",
    )

    valid = [
        """
import torch
with torch.no_grad():
    val_loss = criterion(model(x_val), y_val)
loss = criterion(model(x), y)
loss.backward()
""",
        """
import torch

@torch.no_grad()
def evaluate(model, loader):
    for x, y in loader:
        with torch.enable_grad():
            loss = criterion(model(x), y)
            loss.backward()
""",
        """
import torch
for x, y in loader:
    loss = criterion(model(x), y)
    with torch.no_grad():
        loss.backward()
        total += loss.item()
""",
        """
import torch
with torch.no_grad():
    w = torch.zeros(3, requires_grad=True)
    cached = losses[-1]
    total = get_loss(batch)
w.sum().backward()
cached.backward()
total.backward()
""",
    ]
    invalid = [
        Invalid("""
import torch
with torch.no_grad():
    out = model(x)
    loss = criterion(out, y)
loss.backward()
""", severity=Severity.INFO, evidence=Evidence.UNRESOLVED),  # `criterion` is a loss function by its name only
        Invalid("""
import torch
import torch.nn as nn
net = nn.Linear(4, 2)
with torch.no_grad():
    out = net(torch.randn(8, 4))
out.backward(torch.ones_like(out))
""", evidence=Evidence.MUST),
        Invalid("""
import torch
import torch.nn as nn

def probe(x, wide):
    net = nn.Linear(4, 2) if wide else make_small()
    with torch.no_grad():
        out = net(x)
    out.backward(torch.ones_like(out))
""", severity=Severity.WARNING, evidence=Evidence.MAY),  # `net` is a module on one path only
        """
import torch
import torch.nn.functional as F

@torch.inference_mode()
def finetune_step(model, batch, optimizer):
    logits = model(batch["x"])
    loss = F.cross_entropy(logits, batch["y"])
    loss.backward()
    optimizer.step()
""",
        Invalid("""
import torch
from torch.autograd import grad

def saliency(model, x):
    with torch.no_grad():
        score = model(x).max()
    return grad(score, x)
""", severity=Severity.INFO),
        """
import torch as th

def step(model, x, y, accelerator):
    with th.no_grad():
        accelerator.backward((model(x) - y).pow(2).mean())
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        target = self._target(node, ctx)
        if target is None:
            return
        if isinstance(target, ast.Name):
            binds = ctx.bindings(target)
            if not binds or not all(v is not None and ctx.grad_disabled(owner) and self._computes(v, ctx)
                                    for owner, v in binds):
                return
            if self._revived(ctx, target):
                return
            yield self.hit(node, subject=target.id, evidence=Evidence.MUST)
        elif (isinstance(target, (ast.Call, ast.BinOp, ast.UnaryOp)) and ctx.grad_disabled(node)
              and self._computes(target, ctx)):
            yield self.hit(node, subject=ctx.segment(target), evidence=Evidence.MUST)

    @staticmethod
    def _target(call: ast.Call, ctx: FileContext) -> ast.AST | None:
        qn = ctx.call_name(call)
        if qn in AUTOGRAD_ENTRY:
            t = call.args[0] if call.args else keyword(call, "tensors") or keyword(call, "outputs")
        elif isinstance(call.func, ast.Attribute) and call.func.attr in ("backward", "manual_backward"):
            recv = call.func.value
            text = recv.id if isinstance(recv, ast.Name) else recv.attr if isinstance(recv, ast.Attribute) else ""
            if call.func.attr == "manual_backward" or (call.args and WRAPPER_RECEIVER.search(text)):
                t = call.args[0] if call.args else None
            else:
                t = recv
        else:
            return None
        # ``scaler.scale(loss)``: the loss is what matters
        if isinstance(t, ast.Call) and isinstance(t.func, ast.Attribute) and t.func.attr == "scale" and t.args:
            t = t.args[0]
        return t

    def _computes(self, value: ast.AST, ctx: FileContext) -> bool:
        """``value`` is certainly a fresh computation (its result is made where it is evaluated)."""
        if isinstance(value, (ast.BinOp, ast.UnaryOp)):
            return True
        if not isinstance(value, ast.Call):
            return False
        if creates_grad_leaf(ctx, value):
            return False
        if is_torch_factory(ctx, value) or (ctx.call_name(value) or "").startswith("torch.nn.functional."):
            return True
        func = value.func
        if isinstance(func, ast.Attribute) and func.attr in PASS_METHODS - MAYBE_SELF:
            return True
        if ctx.kinds(func) & {MODULE, LOSS_FN} or ctx.kinds(value) & {LOSS, OUTPUT} and not isinstance(func, ast.Name):
            return not self._enables_grad_inside(func, ctx)
        return False

    @staticmethod
    def _enables_grad_inside(func: ast.AST, ctx: FileContext) -> bool:
        """A local module/function whose code turns gradients back on."""
        cls = ctx.local_module_class(func)
        roots: list[ast.AST] = []
        if cls is not None:
            roots.append(cls)
        if isinstance(func, ast.Name):
            roots.extend(ctx.functions.get(func.id, []))
        for root in roots:
            for n in ast.walk(root):
                if ctx.resolve(n.func if isinstance(n, ast.Call) else n) in GRAD_ENABLERS:
                    return True
        return False

    @staticmethod
    def _revived(ctx: FileContext, target: ast.Name) -> bool:
        """``loss.requires_grad_()`` / ``loss.requires_grad = True`` makes ``backward()`` legal again."""
        key = name_key(target)
        for node in ctx.walk_scope(scope_body(ctx.scope(target))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "requires_grad_" and name_key(node.func.value) == key:
                return True
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "requires_grad"
                                                    and name_key(t.value) == key for t in node.targets):
                return True
        return False
