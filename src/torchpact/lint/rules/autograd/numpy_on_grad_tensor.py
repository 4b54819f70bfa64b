from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.autograd._grad import requires_grad
from torchpact.lint.rules.autograd._util import grad_off, note_grad_mode


class NumpyOnGradTensor(Rule):
    """`.numpy()` is called on a tensor that requires grad.

    ## What it does
    Flags `t.numpy()` (also through `.cpu()`, `.float()`, indexing, `.logits`, ...) called with
    gradients enabled when `t` certainly requires grad: a leaf created with `requires_grad=True` or
    an `nn.Parameter`, a tensor `.backward()` is called on, a model's output in training code (a
    `.backward()` or `.step()` in the same function) or in a module-level script, or arithmetic on
    one of these — each computed with gradients enabled. Calls under `torch.no_grad()` /
    `inference_mode()`, in `validation_step`-style hooks, and outputs of models frozen with
    `requires_grad_(False)` are not flagged.

    ## Why is this bad?
    On torch 2.13, for a CPU tensor, it raises
    `RuntimeError: Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.`
    — whether the tensor is a leaf or not (a CUDA tensor cannot be converted at all without
    `.cpu()`, so that call fails too). The check is made only while grad mode is on: the same
    `.numpy()` call inside `torch.no_grad()` or `torch.inference_mode()` returns the array without
    complaint, which is why code that works in an evaluation loop raises when moved into the
    training loop.

    ## Fix safety
    The fix inserts `.detach()` before `.numpy()`: the same values, no graph, and the array still
    shares memory with the tensor as `.numpy()` always does. A CUDA tensor also needs `.cpu()`,
    which the fix does not add (the hint says so).
    """

    code = "TP205"
    category = Category.AUTOGRAD
    severity = Severity.ERROR
    message = ("`.numpy()` on a tensor that requires grad: torch raises \"Can't call numpy() on Tensor that "
               "requires grad. Use tensor.detach().numpy() instead.\"")
    fix_hint = "call `.detach().cpu().numpy()` (or compute the value under `torch.no_grad()`)"
    nodes = (ast.Call,)
    calls = frozenset({"numpy"})
    triggers = ("numpy()",)
    fixable = True
    facts = ("numpy-of-grad-tensor-raises",)
    requires = (
        "the tensor requires grad: a resolved leaf, a parameter of a value resolved to a module, the output "
        "of a model resolved to a module with parameters, in training code or a script, or arithmetic on one",
        "gradients are on at the call",
    )

    valid = [
        """
import torch
w = torch.randn(3, requires_grad=True)
arr = w.detach().cpu().numpy()
with torch.no_grad():
    out = model(x)
preds = out.argmax(-1).cpu().numpy()
""",
        """
import torch

def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
        grads = [p.grad.numpy() for p in model.parameters()]
""",
        """
import torch

def predict(model, x):
    return model(x).numpy()

with torch.no_grad():
    y = predict(model, x)
""",
        """
import torch
import torch.nn as nn
act = nn.Softmax(dim=-1)
probs = act(torch.randn(2, 3)).numpy()
model = nn.Linear(3, 2)
model.requires_grad_(False)
out = model(torch.randn(2, 3)).numpy()
""",
    ]
    invalid = [
        Invalid(
            """
import torch
w = torch.randn(3, requires_grad=True)
print(w.numpy())
""",
            fixed="""
import torch
w = torch.randn(3, requires_grad=True)
print(w.detach().numpy())
""",
            evidence=Evidence.MUST,
        ),
        Invalid(
            """
import torch
import torch.nn.functional as F

def train(model, loader, optimizer):
    for x, y in loader:
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            raw = logits.numpy()
        preds = logits.argmax(-1).numpy()
        losses.append(loss.cpu().numpy())
""",
            fixed="""
import torch
import torch.nn.functional as F

def train(model, loader, optimizer):
    for x, y in loader:
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            raw = logits.numpy()
        preds = logits.argmax(-1).numpy()
        losses.append(loss.cpu().detach().numpy())
""",
            severity=Severity.WARNING,  # it requires grad because `.backward()` is called on it
            evidence=Evidence.MAY,
        ),
        Invalid(
            """
import torch

def train(model, loader, optimizer):
    for x, y in loader:
        logits = model(x)
        torch.nn.functional.cross_entropy(logits, y).backward()
        optimizer.step()
        history.append(logits[:, 0].float().numpy())
""",
            fixed="""
import torch

def train(model, loader, optimizer):
    for x, y in loader:
        logits = model(x)
        torch.nn.functional.cross_entropy(logits, y).backward()
        optimizer.step()
        history.append(logits[:, 0].float().detach().numpy())
""",
            severity=Severity.INFO,  # `model` is a model by its name only
            evidence=Evidence.UNRESOLVED,
        ),
        Invalid(
            """
from torch import nn
import torch
net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
w = nn.Parameter(torch.ones(1))
y = net(torch.randn(2, 4)) * w
plot(y[:, 0].numpy())
""",
            fixed="""
from torch import nn
import torch
net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
w = nn.Parameter(torch.ones(1))
y = net(torch.randn(2, 4)) * w
plot(y[:, 0].detach().numpy())
""",
            evidence=Evidence.MUST,
        ),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr == "numpy" and not node.args and not node.keywords):
            return
        if grad_off(ctx, node):
            return  # torch only refuses while grad mode is on
        if not requires_grad(ctx, func.value):
            return
        note_grad_mode(ctx, node)
        yield self.hit(node, subject=ctx.segment(func.value), edits=[ctx.locator.insert_after(func.value, ".detach()")],
                       evidence=Evidence.MUST)
