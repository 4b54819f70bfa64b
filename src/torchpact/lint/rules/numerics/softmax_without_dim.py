from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.analysis.following import follows_definitions
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

    The condition it needs: the input is a tensor. A softmax of something that is certainly not one
    — a numpy array (`t.cpu().numpy()`, `np.array(...)`, `np.zeros(...)`, and indexing or arithmetic
    of those alone), a Python number or list (`.item()`, `.tolist()`, a literal) — raises
    `AttributeError: ... has no attribute 'dim'` with or without `dim` on torch 2.13, so no dimension
    is guessed and passing one fixes nothing: not flagged (the input is the bug there, not the `dim`).

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
""", """
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

def nucleus(logits, top_p):
    flat = logits[0, -1].detach().cpu().float().numpy()
    order = np.argsort(flat)[::-1]
    ranked = flat[order]
    mass = np.cumsum(F.softmax(ranked))
    return order[mass > top_p]

def from_lists(rows):
    grid = np.array(rows, dtype=np.float32)
    return F.log_softmax(input=grid), nn.Softmax()(np.zeros((2, 3)))

def as_python(scores: torch.Tensor, flag):
    values = scores.tolist()
    best = scores.max().item()
    if flag:
        host = scores.cpu().numpy() * 2.0 - 1
        return F.softmin(host)
    return F.softmax(values), F.softmax(best), F.softmax([0.1, 0.9])

def per_step(batches):
    for batch in batches:
        arr = np.asarray(batch)
        arr = arr / arr.sum()
        yield torch.nn.functional.softmax(-arr)
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
        Invalid("""
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

def nucleus(logits, top_p):
    flat = logits[0, -1].detach().cpu().float().numpy()
    ranked = torch.from_numpy(flat[np.argsort(flat)[::-1]])
    order = np.argsort(logits)
    return F.softmax(ranked), F.softmax(order)

def mixed(scores, on_host):
    values = scores.cpu().numpy() if on_host else scores
    outs = [scores * 2]
    if on_host:
        values = np.asarray(values)
    return F.log_softmax(values), F.softmax(outs[0]), nn.Softmax()(torch.tensor(np.zeros((2, 3))))
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
        if argument(node, "dim", position) is not None or (qn in MODULES and _never_applied(node, ctx)):
            return
        applied = ctx.parent(node)
        if qn in MODULES:  # ``nn.Softmax()(x)``: the input is known only where the module is called at once
            inputs = applied.args[:1] if isinstance(applied, ast.Call) and applied.func is node else []
        else:
            first = argument(node, "input", 0)
            inputs = [first] if first is not None else []
        if inputs and not_a_tensor(inputs[0], ctx):
            return  # raises AttributeError (no ``.dim()``) whatever the dim: no dimension is guessed
        yield self.hit(node, subject=qn)


# numpy functions that build a new array from their arguments (never hand back a torch tensor)
_NUMPY_MAKERS = frozenset({
    "array", "asarray", "zeros", "ones", "empty", "full", "arange", "linspace", "sort", "concatenate", "stack",
    "zeros_like", "ones_like", "full_like", "where",
})  # not ufuncs nor ``argsort`` / ``cumsum``: given a tensor, those hand back a tensor (checked, numpy 2.4)
_TO_HOST = frozenset({"numpy", "tolist", "item"})


@follows_definitions(False)
def not_a_tensor(expr: ast.AST, ctx: FileContext) -> bool:
    """``expr`` certainly holds a numpy array or a Python number, string or list, not a torch tensor."""
    if isinstance(expr, ast.Constant):
        return expr.value is not None
    if isinstance(expr, (ast.List, ast.ListComp, ast.Dict, ast.Set)):
        return True  # a list (even of tensors) is not one
    if isinstance(expr, ast.Call):
        f = expr.func
        if isinstance(f, ast.Attribute) and f.attr in _TO_HOST and not expr.args and not expr.keywords:
            return ctx.resolve(f) is None  # ``t.cpu().numpy()``, not a module-level ``numpy`` function
        if isinstance(f, ast.Attribute) and ctx.resolve(f) is None and _numpy_made(f.value, ctx):
            return True  # a numpy array's method (``arr.sum()``) gives a numpy array or number
        qn = ctx.call_name(expr) or ""
        return qn.startswith("numpy.") and (qn.rsplit(".", 1)[-1] in _NUMPY_MAKERS or qn.startswith("numpy.random."))
    if isinstance(expr, ast.Subscript):
        return _numpy_made(expr.value, ctx)
    if isinstance(expr, ast.BinOp):
        return not_a_tensor(expr.left, ctx) and not_a_tensor(expr.right, ctx)
    if isinstance(expr, ast.UnaryOp):
        return not_a_tensor(expr.operand, ctx)
    if isinstance(expr, ast.Name):
        binds = ctx.bindings(expr)
        return bool(binds) and all(isinstance(v, ast.expr) and not_a_tensor(v, ctx) for _, v in binds)
    return False


@follows_definitions(False)
def _numpy_made(expr: ast.AST, ctx: FileContext) -> bool:
    """A numpy array (or number): indexing it gives a numpy array or number (a list's item may be a tensor)."""
    if isinstance(expr, (ast.List, ast.ListComp, ast.Dict, ast.Set)) or (
            isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "tolist"):
        return False
    if isinstance(expr, ast.Name):
        binds = ctx.bindings(expr)
        return bool(binds) and all(isinstance(v, ast.expr) and _numpy_made(v, ctx) for _, v in binds)
    return not_a_tensor(expr, ctx)


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
