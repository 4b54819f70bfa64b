from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Invalid, Hit, Rule
from torchpact.lint.rules.autograd._grad import MAYBE_SELF, requires_grad
from torchpact.lint.rules.autograd._util import creates_grad_leaf, name_key, scope_body

class GradOfNonLeaf(Rule):
    """`.grad` is read on a non-leaf tensor that never called `retain_grad()`.

    ## What it does
    Flags `y.grad` when every assignment of `y` in the function computes it from tensors that
    require grad — arithmetic, a torch function, a view or index, or a model's output in training
    code — with gradients enabled, and `y.retain_grad()` is not called (nor `y.grad` assigned) in
    that function. Leaves (`requires_grad=True`, parameters) and conversions that may return the
    tensor itself (`.float()`, `.to(...)`, `.contiguous()`) are not flagged.

    ## Why is this bad?
    `backward()` accumulates gradients only into leaves; for a non-leaf `y`, `y.grad` stays `None`.
    On torch 2.13 reading it returns `None` and emits `UserWarning: The .grad attribute of a Tensor
    that is not a leaf Tensor is being accessed. Its .grad attribute won't be populated during
    autograd.backward(). If you indeed want the .grad field to be populated for a non-leaf Tensor,
    use .retain_grad() on the non-leaf Tensor. ...` — so gradient logging shows nothing, and code
    such as `y.grad.norm()` fails with `AttributeError: 'NoneType' object has no attribute 'norm'`.

    ## Fix safety
    No autofix. Call `y.retain_grad()` right after computing `y` (before `backward()`), read the
    gradient of the leaf you meant, or get it directly with `torch.autograd.grad(loss, y)`.
    """

    code = "TP204"
    category = Category.AUTOGRAD
    severity = Severity.WARNING
    requires = (
        "every assignment of the name computes it from tensors that require grad, with gradients on",
        "`retain_grad()` is not called on it in the function",
    )
    facts = ("grad-of-non-leaf-is-none",)
    message = ("`.grad` of a non-leaf tensor is read without `retain_grad()`: it is always None "
               "(torch only warns)")
    fix_hint = "call `.retain_grad()` on it before `backward()`, or use `torch.autograd.grad(loss, tensor)`"
    nodes = (ast.Attribute,)
    triggers = (".grad",)

    valid = [
        """
import torch
x = torch.randn(3, requires_grad=True)
y = x * 2
y.retain_grad()
y.sum().backward()
print(x.grad, y.grad)
""",
        """
import torch

def train(model, loader, optimizer):
    for batch in loader:
        loss = model(batch).mean()
        loss.backward()
        for p in model.parameters():
            norm = p.grad.norm()
        optimizer.step()
""",
        """
import torch
w = torch.randn(3, requires_grad=True)
v = w.float()
v.sum().backward()
print(v.grad, torch.autograd.grad)
out = model(torch.randn(2, 3))
print(out.grad_fn)
""",
        """
import torch
with torch.no_grad():
    h = torch.randn(3, requires_grad=True) * 2
h = torch.randn(3, requires_grad=True)
print(h.grad)
""",
    ]
    invalid = [
        """
import torch
x = torch.randn(3, requires_grad=True)
y = x * 2
y.sum().backward()
print(y.grad)
""",
        Invalid("""
import torch
import torch.nn.functional as F

def train_step(model, x, target, optimizer):
    logits = model(x)
    loss = F.cross_entropy(logits, target)
    loss.backward()
    log({"logit_grad": logits.grad.norm().item()})
    optimizer.step()
""", severity=Severity.INFO),
        """
import torch as th
w = th.nn.Parameter(th.randn(4, 4))
h = th.tanh(w @ th.randn(4))
h.sum().backward()
grad_norm = h.grad.norm()
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Attribute)
        if node.attr != "grad" or not isinstance(node.ctx, ast.Load) or not isinstance(node.value, ast.Name):
            return
        recv = node.value
        binds = ctx.bindings(recv)
        if not binds:
            return
        if not all(_computed(ctx, value) for _, value in binds):
            return
        if not requires_grad(ctx, recv):
            return
        if _retains(ctx, recv):
            return
        yield self.hit(node, subject=recv.id)


def _computed(ctx: FileContext, value: ast.AST | None) -> bool:
    """A binding's value is computed from other tensors (a non-leaf), not a leaf nor maybe the tensor itself."""
    if value is None or creates_grad_leaf(ctx, value):
        return False
    if not isinstance(value, (ast.BinOp, ast.UnaryOp, ast.Call, ast.Subscript)):
        return False
    return not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in MAYBE_SELF)


def _retains(ctx: FileContext, name: ast.Name) -> bool:
    """``name.retain_grad()`` or ``name.grad = ...`` in the scope (or the name handed to a function)."""
    key = name_key(name)
    for n in ctx.walk_scope(scope_body(ctx.scope(name))):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "retain_grad" \
                and name_key(n.func.value) == key:
            return True
        if isinstance(n, (ast.Assign, ast.AugAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(isinstance(t, ast.Attribute) and t.attr == "grad" and name_key(t.value) == key for t in targets):
                return True
    return False
