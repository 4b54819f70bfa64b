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

    A model that arrives as a parameter counts by what this file passes to its function
    (`_train(Net(), loader)`): a module on every call, none of them a parameter-free layer or a model
    frozen with `requires_grad_(False)`. When other modules may call that function too (it is
    neither nested nor `_private`), the finding holds on some paths only and is a warning.

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
        "a model that is a parameter: what this file's calls of its function pass (for `error`, a function no other "
        "module can call: nested or `_private`)",
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
        """
import torch
import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
    def forward(self, x):
        return self.fc(x)
def _train(net, batches, opt):
    for x, y in batches:
        out = net(x)
        (out - y).pow(2).mean().backward()
        opt.step()
        preds = out.detach().cpu().numpy()
_train(Net(), [], None)
""",
        """
import torch
import torch.nn as nn
@torch.no_grad()
def _predict(net, x):
    return net(x).numpy()
def _fit(net, x, opt):
    net(x).sum().backward()
    opt.step()
    return _predict(net, x)
_fit(nn.Linear(4, 2), torch.randn(3, 4), None)
""",
        """
import torch
import torch.nn as nn
def _probe(frozen, head, x, opt):
    feats = frozen(x)
    loss = head(feats).sum()
    loss.backward()
    opt.step()
    return feats.numpy()
backbone = nn.Linear(4, 4)
backbone.requires_grad_(False)
_probe(backbone, nn.Linear(4, 1), torch.randn(2, 4), None)
""",
        """
import torch
import torch.nn as nn
def _pool_then_log(pool, x, opt, loss):
    pooled = pool(x)
    loss.backward()
    opt.step()
    return pooled.numpy()
_pool_then_log(nn.AdaptiveAvgPool1d(1), torch.randn(2, 3, 8), None, loss)
""",
        """
import torch
import torch.nn as nn
def _fit(model, x, opt):
    out = model(x)
    out.sum().backward()
    opt.step()
    return out.numpy()
_fit(nn.Linear(4, 2).requires_grad_(False), torch.randn(3, 4), None)
""",
        """
import torch
import torch.nn as nn
class Mish(nn.Module):
    def forward(self, t):
        return t * torch.tanh(nn.functional.softplus(t))
class ScaledMish(Mish):
    def __init__(self, scale=2.0):
        super().__init__()
        self.offset = -1.0
    def forward(self, t):
        return super().forward(t) + self.offset
grid = torch.arange(-4.0, 4.0, 0.5)
curve = ScaledMish()(grid).numpy()
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
        Invalid(
            """
import torch
import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
    def forward(self, x):
        return self.fc(x)
def _train(net, batches, opt):
    for x, y in batches:
        out = net(x)
        (out - y).pow(2).mean().backward()
        opt.step()
        preds = out.cpu().numpy()
_train(Net(), [], None)
""",
            fixed="""
import torch
import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
    def forward(self, x):
        return self.fc(x)
def _train(net, batches, opt):
    for x, y in batches:
        out = net(x)
        (out - y).pow(2).mean().backward()
        opt.step()
        preds = out.cpu().detach().numpy()
_train(Net(), [], None)
""",
            evidence=Evidence.MUST,  # every call of the private `_train` passes a Net
        ),
        Invalid(
            """
import torch
import torch.nn as nn
def fit(net, x, opt):
    out = net(x)
    out.sum().backward()
    opt.step()
    return out.numpy()
fit(nn.Linear(4, 2), torch.randn(3, 4), None)
""",
            fixed="""
import torch
import torch.nn as nn
def fit(net, x, opt):
    out = net(x)
    out.sum().backward()
    opt.step()
    return out.detach().numpy()
fit(nn.Linear(4, 2), torch.randn(3, 4), None)
""",
            severity=Severity.WARNING,  # other modules may call the public `fit` with something else
            evidence=Evidence.MAY,
        ),
        Invalid(
            """
import torch
import torch.nn as nn
def _probe(frozen, head, x, opt):
    feats = frozen(x)
    loss = head(feats).sum()
    loss.backward()
    opt.step()
    return feats.numpy()
_probe(nn.Linear(4, 4), nn.Linear(4, 1), torch.randn(2, 4), None)
""",
            fixed="""
import torch
import torch.nn as nn
def _probe(frozen, head, x, opt):
    feats = frozen(x)
    loss = head(feats).sum()
    loss.backward()
    opt.step()
    return feats.detach().numpy()
_probe(nn.Linear(4, 4), nn.Linear(4, 1), torch.randn(2, 4), None)
""",
            evidence=Evidence.MUST,
        ),
        Invalid(
            """
import torch
import torch.nn as nn
class Loop:
    def __init__(self):
        self.model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 1))
    def _step(self, m, x, opt):
        y = m(x)
        y.mean().backward()
        opt.step()
        self.history.append(y[:, 0].numpy())
    def run(self, xs, opt):
        for x in xs:
            self._step(self.model, x, opt)
""",
            fixed="""
import torch
import torch.nn as nn
class Loop:
    def __init__(self):
        self.model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 1))
    def _step(self, m, x, opt):
        y = m(x)
        y.mean().backward()
        opt.step()
        self.history.append(y[:, 0].detach().numpy())
    def run(self, xs, opt):
        for x in xs:
            self._step(self.model, x, opt)
""",
            evidence=Evidence.MUST,
        ),
        Invalid(
            """
import torch
import torch.nn as nn
def main():
    def step(model, x, opt):
        out = model(x)
        out.sum().backward()
        opt.step()
        return out.numpy()
    step(torch.compile(nn.Linear(4, 2)), torch.randn(3, 4), None)
""",
            fixed="""
import torch
import torch.nn as nn
def main():
    def step(model, x, opt):
        out = model(x)
        out.sum().backward()
        opt.step()
        return out.detach().numpy()
    step(torch.compile(nn.Linear(4, 2)), torch.randn(3, 4), None)
""",
            evidence=Evidence.MUST,
        ),
        Invalid(
            """
import torch
import torch.nn as nn
class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1))
    def forward(self, t):
        return t * torch.sigmoid(self.alpha * t)
class SharpGate(Gate):
    def forward(self, t):
        return super().forward(2 * t)
grid = torch.linspace(-4.0, 4.0, 17)
curve = SharpGate()(grid).numpy()
""",
            fixed="""
import torch
import torch.nn as nn
class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1))
    def forward(self, t):
        return t * torch.sigmoid(self.alpha * t)
class SharpGate(Gate):
    def forward(self, t):
        return super().forward(2 * t)
grid = torch.linspace(-4.0, 4.0, 17)
curve = SharpGate()(grid).detach().numpy()
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
