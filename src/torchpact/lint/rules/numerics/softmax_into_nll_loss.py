from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.numerics._loss_input import activated_loss_input
from torchpact.lint.rules.numerics._util import RAW_SCORES, SOFTMAX


class SoftmaxIntoNllLoss(Rule):
    """`NLLLoss` / `F.nll_loss` is given probabilities (a softmax output) or raw scores, where it expects
    log-probabilities.

    ## What it does
    Flags `F.nll_loss(x, y)` and `nn.NLLLoss()(x, y)` when `x` is certainly not a log-probability:

    - the output of a softmax (directly, through a variable, after reshaping, or from a model ending
      in `nn.Softmax`);
    - raw scores: the output of a layer whose values are unnormalised scores of any sign (`nn.Linear`,
      `nn.Bilinear`, `nn.Conv1d/2d/3d`, `F.linear`), directly, through a variable or a reshape, or
      from a model whose every output is one — an `nn.Sequential` whose last layer is one, or a class
      of this file whose `forward` returns only such outputs (a `log_softmax` on the way makes them
      log-probabilities, and nothing is flagged).

    The model is followed where it comes from: a variable, `self.model` set in `__init__`, `.to(...)`,
    `DDP(...)` / `torch.compile(...)`, and a parameter of the function — its annotation (`model:
    MyNet`), else what every call of that function in this file passes (`train(MyNet(), ...)`). When
    other modules may call that function too (it is neither nested nor `_private`), the finding holds
    on some paths only and is a warning.

    ## Why is this bad?
    `nll_loss` only picks `-x[target]`; it assumes `x` is already `log_softmax`. Given
    probabilities, on torch 2.13 the "loss" is `-p[target]`, between -1 and 0: a perfect
    prediction scores -1, the value is never the cross-entropy, and its gradient `-1` on `p[target]`
    is flat instead of `-1/p` — a badly wrong prediction gets no stronger push than a good one.
    Given raw scores it is `-score[target]`: nothing ties the classes together, the objective has no
    minimum, and training only pushes the target scores up without bound — in the proof, 200 SGD
    steps of a linear classifier drive the "loss" to -7.8 and 400 steps to -16.1, while the real
    cross-entropy of that model rises from 2.1 to 3.9 (0.99 when trained with `log_softmax`). The run check
    of the same code sees both at run time.

    ## Fix safety
    No autofix here: use `F.log_softmax` instead of `F.softmax` before the loss, apply it to raw
    scores (or give the scores to `F.cross_entropy`, which does both), which changes the loss values
    to the real negative log-likelihood.
    """

    code = "TP357"  # shared with the run check of the same pattern (watch/watchers/loss_inputs.py)
    category = Category.NUMERICS
    severity = Severity.ERROR
    requires = (
        "the loss is `F.nll_loss` / `nn.NLLLoss` (an instance by every binding, or passed by every call of its "
        "function in this file), resolved through its import",
        "its input holds a softmax output, or a Linear/Bilinear/Conv output, on the one definition that reaches it: "
        "the call itself, a module instance of that class, or a model of this file ending in one (`nn.Sequential`, "
        "a class whose `forward` returns only it)",
        "a model that is a parameter: by its annotation, or by every call of its function in this file (for `error`, a "
        "function no other module can call: nested or `_private`)",
    )
    message = ("softmax output is passed to nll_loss, which expects log-probabilities: the loss is -p[target], "
               "not the negative log-likelihood")
    fix_hint = "use `log_softmax` instead of `softmax` before `nll_loss` (or pass the logits to `cross_entropy`)"
    nodes = (ast.Call,)
    triggers = ("nll_loss", "NLLLoss")

    valid = ["""
import torch.nn.functional as F
loss = F.nll_loss(F.log_softmax(logits, dim=1), y)
probs = F.softmax(logits, dim=1)
""", """
import torch.nn as nn
import torch.nn.functional as F
class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 5)
    def forward(self, h):
        return F.log_softmax(self.proj(h), dim=-1)
def _fit(tagger, batches, opt):
    for h, tags in batches:
        loss = F.nll_loss(tagger(h), tags)
        opt.zero_grad()
        loss.backward()
        opt.step()
_fit(Tagger(), [], None)
""", """
import torch.nn as nn
head = nn.Sequential(nn.Linear(16, 4), nn.LogSoftmax(dim=1))
crit = nn.NLLLoss()
err = crit(head(feats), labels)
""", """
import torch.nn as nn
import torch.nn.functional as F
class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 3)
    def forward(self, x):
        return self.lin(x)
def score(m: Scorer, x, y):
    return F.cross_entropy(m(x), y)
def nll(m: Scorer, x, y):
    return F.nll_loss(F.log_softmax(m(x), dim=1), y)
""", """
import torch.nn as nn
import torch.nn.functional as F
class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)
    def forward(self, x, normalise=True):
        out = self.fc(x)
        if normalise:
            return out.log_softmax(-1)
        return out
def step(model, x, y):
    return F.nll_loss(model(x), y)
step(Mixed(), x, y)
""", """
import torch.nn as nn
import torch.nn.functional as F
def evaluate(model, x, y):
    return F.nll_loss(model(x), y)
evaluate(make_model(), x, y)
evaluate(nn.Sequential(nn.Linear(3, 3), nn.LogSoftmax(1)), x, y)
"""]
    invalid = ["""
import torch.nn.functional as F
from torch import nn
criterion = nn.NLLLoss()
probs = F.softmax(model(x), dim=1)
loss = criterion(probs, y)
""", """
import torch
import torch.nn as nn
import torch.nn.functional as F
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
    def forward(self, x):
        return self.fc(x)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss = F.nll_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
""", """
import torch.nn as nn
clf = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
crit = nn.NLLLoss()
err = crit(clf(feats).view(-1, 4), labels.view(-1))
""", Invalid("""
import torch.nn as nn
import torch.nn.functional as F
class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 5)
    def forward(self, h):
        scores = self.proj(h)
        return scores
def fit(tagger, batches, opt):
    for h, tags in batches:
        loss = F.nll_loss(tagger(h), tags)
        opt.zero_grad()
        loss.backward()
        opt.step()
fit(Tagger(), [], None)
""", severity=Severity.WARNING, evidence=Evidence.MAY), """
import torch.nn as nn
import torch.nn.functional as F
class Probs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)
    def forward(self, x):
        return F.softmax(self.fc(x), dim=1)
def main():
    def run_epoch(net, data):
        for x, y in data:
            F.nll_loss(input=net(x), target=y).backward()
    run_epoch(Probs().to("cpu"), batches)
""", """
import torch.nn as nn
import torch.nn.functional as F
class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 3)
    def forward(self, x):
        return self.lin(x)
def nll(m: Scorer, x, y):
    return F.nll_loss(m(x), y)
""", """
import torch
import torch.nn.functional as F
def _loss(w, b, x, y):
    return F.nll_loss(F.linear(x, w, b), y)
"""]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        arg = activated_loss_input(ctx, node, NLL_FUNCTIONS, NLL_MODULES, SOFTMAX)
        if arg is not None:
            yield self.hit(arg, subject=arg.id if isinstance(arg, ast.Name) else None, evidence=Evidence.MUST)
            return
        arg = activated_loss_input(ctx, node, NLL_FUNCTIONS, NLL_MODULES, RAW_SCORES)
        if arg is not None:
            yield self.hit(arg, RAW_MESSAGE, subject=arg.id if isinstance(arg, ast.Name) else None,
                           fix_hint=RAW_FIX, evidence=Evidence.MUST)


NLL_FUNCTIONS = {"torch.nn.functional.nll_loss"}
NLL_MODULES = {"torch.nn.NLLLoss"}
RAW_MESSAGE = ("raw scores (a Linear/Conv output) are passed to nll_loss, which expects log-probabilities: the loss "
               "is -score[target], which has no minimum, and training pushes the target scores up without bound")
RAW_FIX = "apply `F.log_softmax(x, dim=1)` before `nll_loss`, or give the scores to `F.cross_entropy`"
