from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.autograd._leaf_flow import leaf_on_every_path
from torchpact.lint.rules.autograd._util import (grad_off, inplace_writes, leaf_keys, name_key, note_grad_mode,
                                                 turns_off_grad)


class InplaceOnGradLeaf(Rule):
    """A leaf tensor that requires grad (a parameter) is modified in place with gradients enabled.

    ## What it does
    Flags in-place writes — `w -= lr * w.grad`, `w.sub_(...)`, `w.add_(...)`, `w.zero_()`,
    `w.copy_(...)`, `w[...] = ...` — to a tensor that is a leaf requiring grad: one created with
    `requires_grad=True` (or `Variable(..., requires_grad=True)`), a fresh tensor made one with
    `.requires_grad_()` (`torch.zeros_like(x).uniform_(-e, e).requires_grad_()`,
    `x.clone().detach().requires_grad_()`), an `nn.Parameter` (also `self.w = nn.Parameter(...)`), or the loop
    variable of `for p in model.parameters()` / `for name, p in model.named_parameters()`, when the write is not
    under `torch.no_grad()` / `torch.inference_mode()` (block, decorator, or a function only called
    from such a block in the file).

    The condition is on the value that reaches the write, on every path, by the bindings that
    precede it in control flow (also for `self.w` within its method): a binding after the write, or
    in another branch, does not count; a `self.w` the method has not bound on that path holds
    whatever the class's methods bind it to, and is reported only when every one of them is a leaf
    requiring grad. A test that excludes the case removes it: the write in the branch where
    `isinstance(w, nn.Parameter)` or `w.requires_grad` is false, or after
    `if isinstance(w, nn.Parameter): return` (also `continue`, `raise`, or that test in an `or`). A
    name that is a leaf on some paths and a plain tensor on others (a Parameter in one method, a
    buffer-like tensor in another) is not reported: which one the write meets is not visible here.

    ## Why is this bad?
    On torch 2.13 the write raises at once:
    `RuntimeError: a leaf Variable that requires grad is being used in an in-place operation.`
    (for an indexed write such as `w[0] = 1.0`: `a view of a leaf Variable that requires grad is
    being used in an in-place operation.`). Autograd cannot record an in-place change to a leaf, so
    a hand-written update step has to run with gradients disabled — which is what every
    `torch.optim` optimizer does. Writes under `torch.no_grad()`, writes through `.data`, and
    tensors whose `requires_grad` is switched off first are not flagged.

    ## Fix safety
    No autofix: wrap the update in `with torch.no_grad():` yourself (and zero or clear `w.grad`
    afterwards if you step by hand), or use a `torch.optim` optimizer.
    """

    code = "TP202"
    category = Category.AUTOGRAD
    severity = Severity.ERROR
    requires = (
        "every binding of the written name makes a leaf that requires grad (a resolved factory with "
        "`requires_grad=True`, an `nn.Parameter`, or the parameters of a value resolved to a module)",
        "gradients are on at the write: module-level code, a function that trains, or one this file calls "
        "with gradients on",
    )
    facts = ("inplace-method-on-grad-leaf-raises",)
    message = ("in-place update of a leaf tensor that requires grad with gradients enabled: torch raises "
               "'a leaf Variable that requires grad is being used in an in-place operation'")
    fix_hint = "do the update under `with torch.no_grad():` (or use a torch.optim optimizer)"
    nodes = (ast.Call, ast.AugAssign, ast.Assign)
    triggers = ("requires_grad", "Parameter", "parameters(")

    valid = [
        """
import torch
w = torch.randn(3, requires_grad=True)
for x in data:
    loss = (w * x).sum()
    loss.backward()
    with torch.no_grad():
        w -= 0.1 * w.grad
        w[0] = 0.0
    w.grad.zero_()
""",
        """
import torch

@torch.no_grad()
def decay(model, factor):
    for p in model.parameters():
        p.mul_(factor)

def clip(model):
    for p in model.parameters():
        p.data.clamp_(-0.01, 0.01)
""",
        """
import torch
x = torch.randn(3)
x += 1
w = torch.randn(3, requires_grad=True)
w = w * 2
w += 1
""",
        """
import torch

def sgd(params, lr):
    for p in params:
        p.sub_(lr * p.grad)

def freeze(model):
    for p in model.parameters():
        p.requires_grad_(False)
        p.zero_()

def step(model, lr):
    with torch.no_grad():
        sgd(model.parameters(), lr)
""",
        """
import torch
from torch import nn

class Shift(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = None

    def fit(self, x):
        self.bias = torch.full_like(x[0], 0.5)

    def learn_bias(self, centred):
        if self.learnable is False or isinstance(self.bias, nn.Parameter):
            return
        if centred:
            self.bias.zero_()
        else:
            self.bias = nn.Parameter(self.bias.clone())
""",
        """
import torch

class Temperature(torch.nn.Module):
    def __init__(self, learn):
        super().__init__()
        self.t = torch.nn.Parameter(torch.ones(1))

    def reset(self):
        if isinstance(self.t, torch.nn.Parameter):
            self.t.data.fill_(1.0)
        else:
            self.t.fill_(1.0)
""",
        """
import torch

def zero_frozen(net):
    for q in net.parameters():
        if q.requires_grad:
            continue
        q.zero_()
""",
        """
import torch.nn as nn
import torch

class Gain(nn.Module):
    def __init__(self):
        super().__init__()
        self.g = nn.Parameter(torch.ones(4))

    def rescale(self, k):
        self.g = torch.ones(4) * k
        self.g.mul_(2)
""",
        """
import torch
import torch.nn as nn

class Offset(nn.Module):
    def __init__(self):
        super().__init__()
        self.offset = torch.zeros(3)

    def make_learnable(self):
        self.offset = nn.Parameter(self.offset)

    def recenter(self):
        self.offset.sub_(self.offset.mean())
""",
        """
import torch

class Mask(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.m = torch.nn.Parameter(torch.ones(8))

    def prune(self, idx):
        if not self.m.requires_grad:
            self.m[idx] = 0.0
""",
    ]
    invalid = [
        Invalid("""
import torch
w = torch.randn(3, requires_grad=True)
for x in data:
    loss = (w * x).sum()
    loss.backward()
    w -= 0.1 * w.grad
""", evidence=Evidence.MUST),
        Invalid("""
import torch

def sgd_step(model, lr):
    for p in model.parameters():
        p.sub_(lr * p.grad)
""", severity=Severity.INFO, evidence=Evidence.UNRESOLVED),  # `model` is a model by its name only
        Invalid("""
import torch
import torch.nn as nn

net = nn.Linear(4, 2)

def sgd_step(lr):
    for p in net.parameters():
        p.sub_(lr * p.grad)

sgd_step(0.1)
""", evidence=Evidence.MUST),
        Invalid("""
import torch
import torch.nn as nn

class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.gain = nn.Parameter(nn.init.ones_(torch.empty(4)))

    def reset(self):
        self.gain[0] = 1.0
""", severity=Severity.WARNING, evidence=Evidence.MAY),  # reset() may be called under no_grad elsewhere
        Invalid("""
import torch

def pgd(model, x, y, eps, steps):
    delta = torch.zeros_like(x).uniform_(-eps, eps).requires_grad_()
    for _ in range(steps):
        loss = criterion(model(x + delta), y)
        loss.backward()
        delta += eps / 4 * delta.grad.sign()
""", evidence=Evidence.MUST),  # it back-propagates: gradients are on
        Invalid("""
from torch import nn
import torch

def perturb(model, sigma):
    for name, p in model.named_parameters():
        p.add_(sigma * torch.randn_like(p))
""", severity=Severity.INFO),
        Invalid("""
import torch
from torch import nn

class Shift(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(4))

    def learn_bias(self, centred):
        if centred:
            self.bias.zero_()
        else:
            self.bias = nn.Parameter(self.bias.clone())
""", severity=Severity.WARNING, evidence=Evidence.MAY),  # may be called under no_grad elsewhere
        Invalid("""
import torch
from torch import nn

class Affine(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))
        self.shift = nn.Parameter(torch.zeros(4))

    def reset(self, frozen):
        if isinstance(self.scale, nn.Parameter) and frozen:
            return
        self.shift.zero_()
        self.scale.fill_(1.0)
""", count=2, severity=Severity.WARNING, evidence=Evidence.MAY),
        Invalid("""
import torch

class Bias(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.b = torch.zeros(3)

    def learn(self):
        self.b = torch.nn.Parameter(torch.zeros(3))
        self.b.add_(0.1)
""", severity=Severity.WARNING, evidence=Evidence.MAY),
        Invalid("""
import torch

def decay(net, rate):
    for q in net.parameters():
        if not q.requires_grad:
            continue
        q.mul_(1 - rate)
""", severity=Severity.INFO, evidence=Evidence.UNRESOLVED),  # `net` is a module by its name only
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        for write, target in inplace_writes(node):
            key = name_key(target)
            if key is None or key not in leaf_keys(ctx) or turns_off_grad(ctx, target, key):
                continue
            if not leaf_on_every_path(ctx, write, target):
                continue
            if grad_off(ctx, write):
                continue
            note_grad_mode(ctx, write)
            yield self.hit(write, subject=ctx.segment(target), evidence=Evidence.MUST)
