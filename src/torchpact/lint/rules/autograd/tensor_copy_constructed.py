from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import GRAD_LEAF, GRAPH, FileContext, argument
from torchpact.lint.rule import Hit, Invalid, Rule

TENSOR_FACTORIES = {"torch.tensor", "torch.as_tensor"}
ATTACHED = {GRAPH, GRAD_LEAF}  # a module's output is attached only when it has parameters or an attached input


class TensorCopyConstructed(Rule):
    """`torch.tensor(t)` copies a tensor that is attached to the autograd graph, silently detaching it.

    ## What it does
    Flags `torch.tensor(x)` where `x` is, by local dataflow, a graph-attached tensor: a model
    output, a loss, a parameter, or a value computed from them with gradients on.

    The condition it needs: `x` requires grad, and the analysis resolved that it does (`must` or
    `may`: built here, declared `model: nn.Module`, passed by this file's calls). A value whose type
    is not resolved — a callee known only by its name (`run_model(p)["data"]`, `model(x)` with
    `model` bound nowhere), an item of what a function of this file returns (here a dict of numpy
    arrays) — is no evidence of a tensor: for a numpy array, a list or a number `torch.tensor`
    copies data that has no graph, and nothing is lost. Such calls are not reported.

    A module call attaches its output to a graph only
    when the module has parameters or its input is attached: a parameter-free module (an
    activation, `Dropout`, pooling, `Flatten`, `Upsample`, padding; the list is checked against
    torch 2.13 by a proof) applied to a batch from a loader, a `torch.randn(...)` or a detached
    tensor gives a tensor that does not require grad, and copying it loses nothing. So does a module
    class of this file that can hold no parameter (its bases are `nn.Module` or such classes, it
    stores nothing but constants on `self` and registers nothing: `class Swish(nn.Module)` computing
    `x * torch.sigmoid(x)`); one that stores a submodule or an argument may hold parameters. The same module
    applied to a model's output, or a module with parameters (`Linear`, `Conv2d`, `Sequential`),
    gives an attached one.

    ## Why is this bad?
    On torch 2.13 `torch.tensor(t)` warns `To copy construct from a tensor, it is recommended to
    use sourceTensor.detach().clone()` and returns a new leaf with `requires_grad=False`: anything
    computed from it no longer reaches the model's parameters, so a loss built that way trains
    nothing (`backward()` then fails, or the term silently contributes no gradient).

    ## Fix safety
    No autofix: whether the copy should stay on the graph (`t.clone()`) or leave it
    (`t.detach().clone()`) is the author's choice.
    """

    code = "TP215"
    category = Category.AUTOGRAD
    severity = Severity.WARNING
    requires = (
        "the argument of `torch.tensor(...)` is graph-attached by local dataflow: a model output, a loss, a "
        "parameter",
    )
    message = ("`torch.tensor(t)` on a graph-attached tensor returns a detached copy: gradients stop there "
               "(torch 2.13 warns)")
    fix_hint = "use `t.clone()` to keep the graph, or `t.detach().clone()` to leave it on purpose"
    nodes = (ast.Call,)
    calls = frozenset({"tensor"})
    triggers = ("tensor(",)

    valid = [
        """
import torch
out = model(x)
loss = criterion(out, y)
logged = torch.tensor(loss.item())
labels = torch.tensor(batch_labels)
keep = out.clone()
""",
        """
import torch
from torch import nn
pool = nn.MaxPool2d(2)
for images, _ in loader:
    thumbnail = torch.tensor(pool(images))
""",
        """
import torch
from torch import nn
noise = torch.randn(8)
jitter = torch.tensor(nn.Dropout(p=0.1)(noise))
""",
        """
import torch
from torch import nn
class Probe(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.GELU()

    def snapshot(self, hidden):
        return torch.tensor(self.act(hidden.detach()))
""",
        """
import torch
from torch import nn
up = nn.Upsample(scale_factor=2, mode="nearest")
canvas = torch.zeros(1, 3, 8, 8)
big = torch.tensor(up(input=canvas))
""",
        """
import torch
from torch import nn
flatten = nn.Flatten()
while frames:
    frame = torch.from_numpy(frames.pop())
    row = torch.tensor(flatten(frame))
""",
        """
import numpy as np
import torch

def run_hh_model(params):
    params = np.asarray(params)
    trace = simulate(params.reshape(1, -1))
    return dict(data=trace.reshape(-1), time=np.arange(10))

def simulator(params):
    obs = run_hh_model(params)
    return torch.tensor(obs["data"], dtype=torch.float).reshape(1, -1)

x_o = torch.tensor(run_hh_model(params=np.array([10, 4]))["data"], dtype=torch.float)
""",
        """
import torch

def as_rows(samples, fit_model):
    rows = []
    for s in samples:
        if s is not None:
            rows.append(torch.tensor(data=fit_model(s)))
    return rows

scores = torch.tensor(model(x))
preds = torch.tensor(self.model.predict(x))
""",
        """
import torch
from torch import nn

class Swish(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)

class Shifted(Swish):
    shift = 1.0

d = torch.linspace(-10.0, 10.0, steps=50)
curve = torch.tensor(Swish()(d))
act = Shifted() if d.numel() > 10 else nn.ReLU()
moved = torch.tensor(data=act(torch.randn(4)))
""",
    ]
    invalid = [
        """
import torch
from torch import nn
model = nn.Linear(8, 2)
out = model(x)
scores = torch.tensor(out)
loss = criterion(scores, y)
""",
        """
import torch
from torch import nn
encoder = nn.Linear(4, 4)
act = nn.ReLU()
hidden = act(encoder(x))
frozen = torch.tensor(hidden)
""",
        """
import torch
from torch import nn
proj = nn.Conv2d(3, 8, 3)
for images, _ in loader:
    copied = torch.tensor(proj(images))
""",
        """
import torch
from torch import nn
w = torch.randn(3, requires_grad=True)
squashed = torch.tensor(nn.Tanh()(w))
""",
        """
import torch
from torch import nn
up = nn.Upsample(scale_factor=2)
def enlarge(model: nn.Module, canvas):
    return torch.tensor(up(input=model(canvas)))
""",
        Invalid("""
import torch
from torch import nn

class Swish(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)

class Gate(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

w = torch.randn(3, requires_grad=True)
curve = torch.tensor(Swish()(w))
gated = torch.tensor(Gate(nn.Linear(3, 3))(torch.randn(3)))
""", count=2),
        Invalid("""
import torch
from torch import nn

class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x)

def rows(head: Head, batches, scale):
    out = [torch.tensor(head(b)) for b in batches]
    w = torch.zeros(3, requires_grad=True)
    if scale:
        out.append(torch.tensor(data=w * scale))
    return out
""", count=2),
        """
import torch
from torch import nn
block = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
pooled = torch.tensor(block(torch.ones(1, 2)))
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if ctx.call_name(node) != "torch.tensor":
            return
        data = argument(node, "data", 0)
        if data is None or ctx.grad_disabled(node):
            return
        if ctx.kinds(data, hints=False) & ATTACHED:  # a name hint is no evidence of a tensor
            yield self.hit(node, subject=ctx.locator.source(data))
