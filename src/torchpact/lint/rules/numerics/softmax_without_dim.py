from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, argument
from torchpact.lint.rule import Hit, Invalid, Rule, last_names

# function -> position of `dim` ; module class -> position of `dim`
FUNCTIONS = {"torch.nn.functional.softmax": 1, "torch.nn.functional.log_softmax": 1,
             "torch.nn.functional.softmin": 1}
MODULES = {"torch.nn.Softmax": 0, "torch.nn.LogSoftmax": 0, "torch.nn.Softmin": 0}


class SoftmaxWithoutDim(Rule):
    """A softmax is taken without `dim`, so torch guesses the dimension from the input's rank.

    ## What it does
    Flags `F.softmax(x)`, `F.log_softmax(x)`, `F.softmin(x)`, `nn.Softmax()`, `nn.LogSoftmax()` and
    `nn.Softmin()` without a `dim`.

    torch guesses the dimension (and warns) only when the softmax runs on an input: for the
    functions at the call, for a module when its `forward` runs. Building the module does nothing,
    so a module without `dim` is flagged only where it may be applied: called, put in a container
    such as `nn.Sequential`, handed on, or bound to a name or attribute that the file reads. One
    bound to an attribute (`self.softmax = nn.Softmax()`) or a name that nothing in the file ever
    reads, or built as a bare statement, normalises nothing and is not flagged.

    ## Why is this bad?
    torch 2.13 warns `Implicit dimension choice for softmax has been deprecated` and then picks
    `dim=0` for 0-, 1- and 3-dimensional inputs and `dim=1` otherwise. For a batch of sequences
    `(batch, seq, vocab)` it normalises over the *batch*: every row sums to anything but 1 and the
    model trains on wrong probabilities without an error. The guess also changes silently when a
    batch dimension is added or removed.

    ## Fix safety
    No autofix: only the author knows which dimension holds the classes (usually `dim=-1`).
    """

    code = "TP318"
    category = Category.NUMERICS
    severity = Severity.WARNING
    requires = (
        "the call resolves to torch's softmax / log_softmax / softmin (function or module) through the file's"
        " imports",
    )
    message = ("softmax without `dim`: torch guesses the dimension from the input's rank (dim 0 for a 3-D "
               "input, the batch), silently normalising over the wrong axis")
    fix_hint = "pass the class dimension explicitly, e.g. `dim=-1`"
    nodes = (ast.Call,)
    calls = last_names(FUNCTIONS, MODULES)
    triggers = ("oftm",)

    valid = ["""
import torch
import torch.nn.functional as F
from torch import nn
p = F.softmax(logits, dim=-1)
lp = F.log_softmax(logits, 1)
head = nn.Sequential(nn.Linear(8, 4), nn.LogSoftmax(dim=1))
act = nn.Softmax(-1)
q = torch.softmax(x, -1)
""", """
from torch import nn
class Classifier(nn.Module):
    def __init__(self, width, classes):
        super().__init__()
        self.proj = nn.Linear(width, classes)
        self.normalise = nn.Softmax()  # built, never applied: forward returns the logits
        self.unused_log = nn.LogSoftmax()

    def forward(self, x):
        return self.proj(x)

def build():
    probs = nn.Softmin()
    nn.Softmax()
    return nn.Linear(2, 2)
"""]
    invalid = [
        Invalid("""
import torch.nn.functional as F
from torch import nn
attn = F.softmax(scores)
head = nn.Sequential(nn.Linear(8, 4), nn.LogSoftmax())
""", count=2),
        Invalid("""
import torch
from torch import nn
class Classifier(nn.Module):
    def __init__(self, width, classes):
        super().__init__()
        self.proj = nn.Linear(width, classes)
        self.normalise = nn.Softmax()

    def forward(self, x):
        return self.normalise(self.proj(x))

def scores(x, kind):
    act = nn.LogSoftmax() if kind == "log" else nn.Softmin()
    return act(x)

def layers(activation=None):
    return [nn.Linear(4, 4), activation or nn.Softmax()]

probs = nn.Softmax()(torch.randn(2, 3, 5))
""", count=5),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        qn = ctx.call_name(node)
        position = FUNCTIONS.get(qn, MODULES.get(qn))
        if position is None or any(isinstance(a, ast.Starred) for a in node.args):
            return
        if any(k.arg is None for k in node.keywords):
            return
        if argument(node, "dim", position) is None and not (qn in MODULES and _never_applied(node, ctx)):
            yield self.hit(node, subject=qn)


def _never_applied(module: ast.Call, ctx: FileContext) -> bool:
    """Whether the module built by ``module`` can never run: it is a bare statement, or it is bound to
    a name or attribute that no code of the file reads."""
    parent = ctx.parent(module)
    if isinstance(parent, ast.Expr):
        return True
    if not (isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is module):
        return False
    targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
    for target in targets:
        if isinstance(target, ast.Name):
            scope = ctx.scope(parent)
            if any(isinstance(n, ast.Name) and n.id == target.id and isinstance(n.ctx, ast.Load)
                   for n in ast.walk(scope)):
                return False
        elif isinstance(target, ast.Attribute):
            # any read of an attribute of that name (``self.act(x)``, ``model.act``, ``getattr(m, "act")``)
            if any(isinstance(n, ast.Attribute) and n.attr == target.attr and isinstance(n.ctx, ast.Load)
                   for n in ctx.nodes(ast.Attribute)):
                return False
            if any(isinstance(n, ast.Constant) and n.value == target.attr for n in ctx.nodes(ast.Constant)):
                return False
        else:
            return False
    return True
