from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.numerics._util import (
    SOFTMAX,
    first_arg,
    is_instance_of,
    produced_by,
)

CROSS_ENTROPY_FUNCTIONS = {"torch.nn.functional.cross_entropy"}
CROSS_ENTROPY_MODULES = {"torch.nn.CrossEntropyLoss"}


class SoftmaxIntoCrossEntropy(Rule):
    """The output of a softmax is passed to `CrossEntropyLoss` / `F.cross_entropy`, which expects logits.

    ## What it does
    Flags `F.cross_entropy(x, y)` and `nn.CrossEntropyLoss()(x, y)` (also through a variable holding
    the loss module) when `x` is the output of a softmax: `torch.softmax` / `F.softmax` /
    `x.softmax(dim)` / an `nn.Softmax` module, directly, through a variable assigned from it, after
    reshaping (`.view`, `.flatten`, indexing), or as the output of a model that ends in a softmax
    (`nn.Sequential(..., nn.Softmax(dim=1))`, or a local module whose `forward` returns one).

    The model is followed where it comes from: a variable, `self.model` set in `__init__`, `.to(...)`,
    `DDP(...)` / `torch.compile(...)`, and a parameter of the function — its annotation (`model:
    MyNet`), else what every call of that function in this file passes (`train(MyNet(), loader)`).
    The condition on a parameter: every call site passes a model that ends in a softmax. When other
    modules may call the function too (it is neither nested in another function nor `_private`),
    what this file's calls pass holds on some paths only, and the finding is a warning.

    ## Why is this bad?
    `cross_entropy` applies `log_softmax` to its input itself, so this computes
    `log_softmax(softmax(logits))`: the loss of a distribution squashed towards uniform. On torch 2.13,
    with 3 classes the loss of a *perfect* prediction is `log(1 + 2/e) = 0.5514`, not 0, and it can
    never go lower; and a confidently wrong prediction (logits `[0, 10, 0]`, target 0) gets a
    gradient of about `6e-05` on its logits instead of about `1.0` — the mistakes the model most
    needs to correct are the ones it barely learns from. Training still runs, and converges slowly
    or to a worse model, with no error anywhere.

    ## Fix safety
    No autofix: removing the softmax changes the loss values (they become the real cross-entropy)
    and the softmax may be needed elsewhere (for predictions). Pass the logits to the loss and take
    the softmax only where probabilities are needed.
    """

    code = "TP301"
    category = Category.NUMERICS
    severity = Severity.ERROR
    requires = (
        "the loss is `F.cross_entropy` / `nn.CrossEntropyLoss` (an instance by every binding, or passed by every call "
        "of its function in this file), resolved through its import",
        "its input holds a softmax output on the one definition that reaches it: a torch softmax call, a tensor's "
        "`.softmax()`, an `nn.Softmax` instance, or a model of this file ending in one (`nn.Sequential`, a class "
        "whose `forward` returns it)",
        "a model that is a parameter: by its annotation, or by every call of its function in this file (for `error`, a "
        "function no other module can call: nested or `_private`)",
    )
    facts = ("cross-entropy-expects-logits",)
    message = ("softmax output is passed to cross_entropy, which applies log_softmax itself: the loss is "
               "computed on probabilities, cannot reach 0 and its gradients vanish for confident mistakes")
    fix_hint = "pass the logits (the input of the softmax) to the loss; keep the softmax for predictions only"
    nodes = (ast.Call,)
    triggers = ("cross_entropy", "CrossEntropyLoss")

    valid = [
        """
import torch.nn as nn
import torch.nn.functional as F
criterion = nn.CrossEntropyLoss()
for x, y in loader:
    logits = model(x)
    probs = F.softmax(logits, dim=-1)
    loss = criterion(logits, y)
    acc = (probs.argmax(-1) == y).float().mean()
""",
        """
import torch
import torch.nn.functional as F
def distill(student_logits, teacher_logits):
    # soft targets: the softmax is the *target*, which is right
    return F.cross_entropy(student_logits, torch.softmax(teacher_logits / 2.0, dim=-1))
""",
        """
import torch.nn as nn
import torch.nn.functional as F
def step(model, x, y, use_probs):
    out = model(x)
    if use_probs:
        out = F.softmax(out, dim=1)
    else:
        out = out * 1.0
    return nn.CrossEntropyLoss()(out, y)
""",
        """
import torch.nn as nn
import torch.nn.functional as F
def loss(logits, y):
    # log_softmax is idempotent: cross_entropy(log_softmax(x)) == cross_entropy(x)
    return F.cross_entropy(F.log_softmax(logits, dim=-1), y)
""",
        """
import torch.nn as nn
import torch.nn.functional as F
class Logits(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 4)
    def forward(self, x):
        return self.head(x)
def fit(model: Logits, batches, opt):
    for x, y in batches:
        F.cross_entropy(model(x), y).backward()
        opt.step()
""",
        """
import torch.nn as nn
import torch.nn.functional as F
class LogProbs(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 4)
    def forward(self, x):
        return F.log_softmax(self.head(x), dim=1)
def _epoch(net, batches):
    crit = nn.CrossEntropyLoss()
    for x, y in batches:
        crit(net(x), y).backward()
_epoch(LogProbs(), data)
""",
        """
import torch.nn as nn
import torch.nn.functional as F
def _epoch(net, batches):
    for x, y in batches:
        F.cross_entropy(net(x), y).backward()
_epoch(build_network(cfg), data)
""",
        """
import torch
import torch.nn as nn
import torch.nn.functional as F
class Probs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
    def forward(self, x):
        return self.fc(x).softmax(-1)
class Raw(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
    def forward(self, x):
        return self.fc(x)
def distill(student, teacher, x):
    # the teacher's probabilities are the target: right
    return F.cross_entropy(student(x), teacher(x))
distill(torch.compile(Raw()), Probs(), batch)
""",
        """
import torch.nn as nn
import torch.nn.functional as F
class Probs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
    def forward(self, x):
        return self.fc(x).softmax(-1)
def _predict(model, x):
    return model(x).argmax(-1)
def _train(model, x, y):
    return F.cross_entropy(model.fc(x), y)
_predict(Probs(), inputs)
_train(Probs(), inputs, labels)
""",
        """
import torch.nn as nn
class Probs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
    def forward(self, x):
        return self.fc(x).softmax(-1)
def _fit(model, batches, criterion):
    for x, y in batches:
        criterion(model(x), y).backward()
_fit(Probs(), data, nn.MSELoss())
""",
    ]
    invalid = [
        """
import torch
import torch.nn as nn
criterion = nn.CrossEntropyLoss()
for x, y in loader:
    probs = torch.softmax(model(x), dim=1)
    loss = criterion(probs, y)
    loss.backward()
""",
        """
import torch.nn.functional as F
def compute_loss(model, x, y):
    logits = model(x)
    return F.cross_entropy(F.softmax(logits, dim=-1).view(-1, logits.size(-1)), y.view(-1))
""",
        """
from torch import nn
model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10), nn.Softmax(dim=1))
loss_fn = nn.CrossEntropyLoss()
for x, y in loader:
    out = model(x)
    loss = loss_fn(out, y)
""",
        """
import torch.nn as nn
class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 4)
        self.softmax = nn.Softmax(dim=-1)
    def forward(self, x):
        return self.softmax(self.fc(x))
net = Classifier()
loss = nn.CrossEntropyLoss()(net(inputs), labels)
""",
        """
import torch.nn.functional as F
def training_step(batch, model):
    x, y = batch
    scores = model(x).softmax(-1)
    return F.cross_entropy(input=scores, target=y, label_smoothing=0.1)
""",
        """
import torch.nn as nn
import torch.nn.functional as F
class Probs(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 4)
    def forward(self, x):
        return F.softmax(self.head(x), dim=1)
def fit(model: Probs, batches, opt):
    for x, y in batches:
        F.cross_entropy(model(x), y).backward()
        opt.step()
""",
        """
import torch.nn as nn
import torch.nn.functional as F
class Probs(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Sequential(nn.Linear(8, 4), nn.Softmax(dim=-1))
    def forward(self, x):
        return self.head(x)
def _epoch(net, batches):
    crit = nn.CrossEntropyLoss()
    for x, y in batches:
        crit(net(x), y).backward()
_epoch(Probs(), data)
""",
        Invalid("""
import torch
import torch.nn as nn
class Probs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
    def forward(self, x):
        return self.fc(x).softmax(-1)
def train(model, loader, optimizer):
    criterion = nn.CrossEntropyLoss()
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
net = Probs()
train(net, [], torch.optim.SGD(net.parameters(), lr=0.1))
""", severity=Severity.WARNING, evidence=Evidence.MAY),  # `train` may be called from elsewhere
        """
import torch
import torch.nn as nn
import torch.nn.functional as F
class Probs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
    def forward(self, x):
        return self.fc(x).softmax(-1)
def main(rank):
    def step(student, x, y):
        return F.cross_entropy(student(x), y)
    step(torch.compile(Probs().to(rank)), batch, labels)
""",
        Invalid("""
import torch
import torch.nn as nn
class Probs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.sm = nn.Softmax(dim=1)
    def forward(self, x):
        x = self.fc(x)
        return self.sm(x)
def train(model, loader, criterion, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        out = model(x)
        loss = criterion(out, y)
        loss.backward()
        optimizer.step()
if __name__ == "__main__":
    net = Probs()
    train(net, [], nn.CrossEntropyLoss(), torch.optim.Adam(net.parameters()))
""", severity=Severity.WARNING, evidence=Evidence.MAY),  # the model and the loss both arrive as parameters
        Invalid("""
import torch.nn as nn
import torch.nn.functional as F
class Probs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
    def forward(self, x):
        return self.fc(x).softmax(-1)
class Trainer:
    def __init__(self):
        self.model = Probs()
    def _loss(self, model, x, y):
        return F.cross_entropy(model(x), y)
    def fit(self, x, y):
        return self._loss(model=self.model, x=x, y=y)
"""),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if not (ctx.call_name(node) in CROSS_ENTROPY_FUNCTIONS
                or is_instance_of(ctx, node.func, CROSS_ENTROPY_MODULES)):
            return
        arg = first_arg(node)
        if arg is None:
            return
        source = produced_by(ctx, arg, SOFTMAX)
        if source is None:
            return
        subject = arg.id if isinstance(arg, ast.Name) else None
        yield self.hit(arg, subject=subject, evidence=Evidence.MUST)
