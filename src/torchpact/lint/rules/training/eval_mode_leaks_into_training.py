from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.training._mode_dependence import DEPENDENT, FREE, UNKNOWN, ModeDependence
from torchpact.lint.rules.training._util import (
    innermost_training_loop,
    local_callees,
    loop_nodes,
    mode_events,
    mode_switch,
    src,
)

# Builtins that cannot switch a module's mode.
HARMLESS_BUILTINS = {"print", "len", "isinstance", "getattr", "hasattr", "str", "repr", "type", "id", "enumerate",
                     "zip", "range", "iter", "next", "list", "tuple", "dict", "set", "sum", "min", "max", "float",
                     "int", "round", "sorted", "any", "all", "format"}


class EvalModeLeaksIntoTraining(Rule):
    """`model.eval()` runs inside the training loop, but `model.train()` only before it.

    ## What it does
    Flags a switch to eval mode — `model.eval()`, `model.train(False)`, or a call to a function of
    the same file that does it (`evaluate(model)` where `evaluate` calls `model.eval()`) — inside a
    loop that trains (calls `backward()`), when the same model is put in train mode only *before*
    that loop (`model.train()`, or `model = Net()`: a new module is in train mode), and nothing in
    the loop calls `train()` on it again (directly or through a local function). A loop that gives
    the model (or an object holding it) to code of another module, which may call `train()`, is not
    flagged. Nor is a loop over models (each iteration binds the module it trains anew: a
    constructor, a factory, `copy.deepcopy`, an item of the models it iterates): no later iteration
    trains the module it put in eval mode.

    The consequence depends on what the model holds, and the finding says what was seen. Only a
    module whose forward reads `self.training` computes differently in eval mode: in torch 2.13 the
    Dropout family (`p > 0`), BatchNorm (`track_running_stats=True`, the default), InstanceNorm with
    `track_running_stats=True`, RReLU, RNN / LSTM / GRU with `dropout > 0`, MultiheadAttention and
    the Transformer layers, and any class of the project that reads `.training` itself. When the
    model is built in this file (its class, `nn.Sequential(...)`, a local factory, also through
    `a, model = make()`) and nothing it builds or is handed is such a module — `Linear`, `ReLU`,
    `Conv2d`, `LayerNorm`, an `LSTM` without dropout... — training in eval mode is bit-for-bit the
    same, and nothing is reported. A base class this file does not show counts only if it can run:
    `nn.Module.__init__` does not call the next base's `__init__`, so a mixin listed after
    `nn.Module`, whose attributes the class never reads, adds nothing. When the model comes from
    elsewhere (a parameter, another package's factory) the finding is an `info` about a latent
    mistake: whether it holds a mode-dependent module is not seen.

    ## Why is this bad?
    `eval()` sets `training = False` on every submodule and it stays so until `train()` is called.
    From the second epoch on (or from the first evaluation on), the model trains in eval mode:
    dropout is off and BatchNorm normalizes with its running statistics instead of the batch's, and
    stops updating them. On torch 2.13, a model with `nn.Dropout(0.5)` gives identical outputs for
    repeated calls after `evaluate(model)` returns, where train mode drops half the activations
    every call. No error: the model just regularizes less and its BatchNorm statistics freeze. A
    model of `Linear` and `ReLU` layers trained with `eval()` left on ends with exactly the weights
    of the same training in train mode (the proof checks both, and that the list of mode-dependent
    modules above is every `torch.nn` module whose code reads `training`).

    ## Fix safety
    No autofix. Call `model.train()` at the start of each epoch's training part (inside the loop),
    or have the evaluation function restore the mode it found (`was_training = model.training ...
    model.train(was_training)`).
    """

    code = "TP402"
    category = Category.TRAINING
    severity = Severity.WARNING
    requires = (
        "the loop back-propagates, and the model switched to eval in it is put in train mode only before the "
        "loop",
        "the model holds a module whose forward reads `training` (resolved when the model is built in this file; "
        "`info` when it is not seen)",
    )
    facts = ("eval-mode-persists-until-train",)
    message = ("the model is put in eval mode inside the training loop and train() is only called before the "
               "loop: later iterations train with its modules that read `training` (Dropout, BatchNorm...) in "
               "eval mode")
    fix_hint = "call model.train() inside the loop, before the training steps (or restore the mode after evaluating)"
    nodes = (ast.Call,)
    triggers = ("eval", ".train(")

    valid = [
        """
import torch
def evaluate(model, loader):
    model.eval()
    with torch.no_grad():
        return sum(model(x).argmax(-1).eq(y).sum().item() for x, y in loader)

for epoch in range(10):
    model.train()
    for x, y in train_loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
    evaluate(model, val_loader)
""",
        """
import torch
def train_one_epoch(model, loader, optimizer):
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        model(x, y).backward()
        optimizer.step()

model.train()
for epoch in range(10):
    train_one_epoch(model, train_loader, optimizer)
    model.eval()
    validate(model)
""",
        """
import torch
student.train()
teacher.eval()
for x, y in loader:
    teacher.eval()
    with torch.no_grad():
        soft = teacher(x)
    loss = kd_loss(student(x), soft, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
""",
        """
import torch
from engine import train_one_epoch
model.train()
for epoch in range(10):
    train_one_epoch(model, loader, optimizer)
    model.eval()
""",
        """
import torch
def evaluate(model):
    was_training = model.training
    model.eval()
    score = run(model)
    model.train(was_training)
    return score

model.train()
for step, (x, y) in enumerate(loader):
    model(x, y).backward()
    optimizer.step()
    optimizer.zero_grad()
    if step % 100 == 0:
        evaluate(model)
""",
        """
import torch
def train(transformer, loader, opt, device, args):
    transformer.train()
    for epoch in range(3):
        for batch_id, (x, y) in enumerate(loader):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(transformer(x), y)
            loss.backward()
            opt.step()
            if (batch_id + 1) % args.checkpoint_interval == 0:
                transformer.eval().cpu()
                torch.save(transformer.state_dict(), "ckpt.pth")
                transformer.to(device).train()
""",
        """
import torch
def train(net, loader, opt, device, val_set):
    for epoch in range(3):
        net = net.eval().cpu()
        evaluate(net, val_set)
        net = net.to(device).train()
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
""",
        """
import torch
from torch import nn

class TinyMLP(nn.Module):
    def __init__(self, d_in=6, hidden=10):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(inplace=True))
        self.head = nn.Linear(hidden, 2)
    def forward(self, x):
        return self.head(self.body(x))

mlp = TinyMLP()
opt = torch.optim.SGD(mlp.parameters(), lr=0.1)
mlp.train()
for epoch in range(3):
    for x, y in train_loader:
        opt.zero_grad()
        nn.functional.cross_entropy(mlp(x), y).backward()
        opt.step()
    mlp.eval()
    with torch.no_grad():
        val = sum(nn.functional.cross_entropy(mlp(x), y).item() for x, y in val_loader)
""",
        """
import torch
import torch.nn as nn
regressor = nn.Sequential(nn.Conv1d(3, 8, 3), nn.Tanh(), nn.Flatten(), nn.LazyLinear(1), nn.LayerNorm(1))
optim = torch.optim.Adam(regressor.parameters())
step = 0
while step < 1000:
    loss = (regressor(next(batches)) ** 2).mean()
    optim.zero_grad()
    loss.backward()
    optim.step()
    step += 1
    if step % 50 == 0:
        regressor.train(False)
""",
        """
import torch
from torch import nn

def build(width):
    return nn.Sequential(nn.Embedding(100, width), nn.LSTM(width, width, batch_first=True))

def score(m, data):
    m.eval()
    return [m(t)[0].sum() for t in data]

encoder = build(16)
sgd = torch.optim.SGD(encoder.parameters(), lr=0.01)
encoder.train()
for tokens in loader:
    sgd.zero_grad()
    encoder(tokens)[0].pow(2).mean().backward()
    sgd.step()
    score(encoder, held_out)
""",
        """
import torch
from torch import nn

class Plain(nn.Module):
    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.fc = nn.Linear(n_in, n_out)
        self.norm = nn.BatchNorm1d(n_out, track_running_stats=False)
        self.drop = nn.Dropout(p=0.0)
    def forward(self, x):
        return self.drop(self.norm(self.fc(x)))

def prepare():
    data = make_data()
    return data, Plain(4, 3).to("cpu")

def run():
    data, net = prepare()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    net.train()
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
        net.eval()
""",
        """
import torch
from torch import nn
from mylib.models import Describable

class Probe(nn.Module, Describable):
    def __init__(self, dim=8):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.act = nn.GELU()
    def forward(self, x):
        return self.act(self.proj(x))

class Trainer:
    def __init__(self):
        self.model = Probe()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def fit(self, loader):
        self.model.train()
        for i, x in enumerate(loader):
            self.opt.zero_grad()
            self.model(x).sum().backward()
            self.opt.step()
            if i % 10 == 0:
                self.model.eval()
""",
    ]
    invalid = [
        Invalid("""
import torch
def evaluate(net, loader):
    net.eval()
    with torch.no_grad():
        return sum(criterion(net(x), y).item() for x, y in loader)

model.train()
for epoch in range(10):
    for x, y in train_loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
    val_loss = evaluate(model, val_loader)
""", severity=Severity.INFO),
        Invalid("""
import torch
class Trainer:
    def fit(self):
        self.model.train()
        for step, batch in enumerate(self.loader):
            loss = self.model(**batch).loss
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad()
            if step % self.eval_every == 0:
                self.model.eval()
                self.validate()

    def validate(self):
        with torch.no_grad():
            return [self.model(**b).loss.item() for b in self.val_loader]
""", severity=Severity.INFO),
        """
import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.3))
    def forward(self, x):
        return self.fc(x)

def test(model, loader):
    model.eval()
    return [model(x) for x in loader]

def main(loader, optimizer):
    model = Net().to("cuda")  # a new module is in train mode
    for epoch in range(5):
        for x in loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
        test(model, loader)
""",
        """
import torch
from torch import nn

class TinyMLP(nn.Module):
    def __init__(self, d_in=6, hidden=10):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(inplace=True), nn.Dropout(0.2))
        self.head = nn.Linear(hidden, 2)
    def forward(self, x):
        return self.head(self.body(x))

mlp = TinyMLP()
opt = torch.optim.SGD(mlp.parameters(), lr=0.1)
mlp.train()
for epoch in range(3):
    for x, y in train_loader:
        opt.zero_grad()
        nn.functional.cross_entropy(mlp(x), y).backward()
        opt.step()
    mlp.eval()
""",
        """
import torch
import torch.nn as nn
regressor = nn.Sequential(nn.Conv1d(3, 8, 3), nn.BatchNorm1d(8), nn.Tanh(), nn.Flatten(), nn.LazyLinear(1))
optim = torch.optim.Adam(regressor.parameters())
step = 0
while step < 1000:
    loss = (regressor(next(batches)) ** 2).mean()
    optim.zero_grad()
    loss.backward()
    optim.step()
    step += 1
    if step % 50 == 0:
        regressor.train(False)
""",
        """
import torch
from torch import nn

def build(width):
    return nn.Sequential(nn.Embedding(100, width), nn.LSTM(width, width, num_layers=2, dropout=0.1))

def score(m, data):
    m.eval()
    return [m(t)[0].sum() for t in data]

encoder = build(16)
sgd = torch.optim.SGD(encoder.parameters(), lr=0.01)
encoder.train()
for tokens in loader:
    sgd.zero_grad()
    encoder(tokens)[0].pow(2).mean().backward()
    sgd.step()
    score(encoder, held_out)
""",
        """
import torch
from torch import nn

class Noisy(nn.Module):
    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.fc = nn.Linear(n_in, n_out)
    def forward(self, x):
        y = self.fc(x)
        return y + torch.randn_like(y) if self.training else y

def prepare():
    data = make_data()
    return data, Noisy(4, 3).to("cpu")

def run():
    data, net = prepare()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    net.train()
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
        net.eval()
""",
        Invalid("""
import torch
from torch import nn
from mylib.models import Describable

class Probe(Describable, nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
    def forward(self, x):
        return self.proj(x)

class Trainer:
    def __init__(self):
        self.model = Probe()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def fit(self, loader):
        self.model.train()
        for i, x in enumerate(loader):
            self.opt.zero_grad()
            self.model(x).sum().backward()
            self.opt.step()
            if i % 10 == 0:
                self.model.eval()
""", severity=Severity.INFO),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if not ctx.in_loop(node):
            return
        evals = self._evals_at(node, ctx)
        if not evals:
            return
        loop = innermost_training_loop(ctx, node, same_model=True)
        if loop is None or _leaves_loop_after(ctx, node):
            return
        body = loop_nodes(loop)
        events = list(mode_events(ctx, body))
        trained_in_loop = {text for mode, text, _ in events if mode == "train"}
        before = _statements_before(ctx, loop, ctx.scope(loop))
        for text in evals:
            if text in trained_in_loop or _handed_to_foreign_code(ctx, body, text):
                continue
            if _mode_before(ctx, before, text) != "train":
                continue
            mode = _model_mode(ctx, node, body, text)
            if mode == FREE:
                continue  # no module of it reads `training`: eval mode trains the same
            if mode == DEPENDENT:
                yield self.hit(node, subject=text)
            else:
                ctx.note(Evidence.UNRESOLVED, f"`{text}` is not built in this file: whether it holds a module that "
                         "reads `training` (Dropout, BatchNorm...) is not seen")
                yield self.hit(node, subject=text, message=(
                    "the model is put in eval mode inside the training loop and train() is only called before the "
                    "loop: if it holds Dropout, BatchNorm or another module that reads `training`, later "
                    "iterations train with them in eval mode"))
            return

    @staticmethod
    def _evals_at(node: ast.Call, ctx: FileContext) -> list[str]:
        """The modules this call puts in eval mode (and does not put back in train mode itself)."""
        direct = mode_switch(ctx, node)
        if direct is not None:
            mode, module = direct
            # no type check on the receiver: it must also have been put in train mode before the loop
            return [src(ctx, module)] if mode == "eval" else []
        if not local_callees(ctx, node):
            return []
        events = list(mode_events(ctx, [node]))
        trained = {text for mode, text, _ in events if mode == "train"}
        return [text for mode, text, _ in events if mode == "eval" and text not in trained
                and not text.startswith("<")]


def _model_mode(ctx: FileContext, node: ast.AST, body: list[ast.AST], text: str) -> str:
    """Whether the module ``text`` (as this loop reads it) computes differently in eval mode."""
    dep = ctx.memo.get("mode_dependence")
    if not isinstance(dep, ModeDependence):
        dep = ctx.memo["mode_dependence"] = ModeDependence(ctx)
    for n in [*ast.walk(node), *ctx.walk_scope(body)]:
        if isinstance(n, (ast.Name, ast.Attribute)) and src(ctx, n) == text:
            return dep.of_expr(n)
    return UNKNOWN


def _leaves_loop_after(ctx: FileContext, node: ast.AST) -> bool:
    """``model.eval(); ...; break`` (or return / raise): no training follows in this loop."""
    stmt = ctx.statement(node)
    parent = ctx.parent(stmt)
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and stmt in block:
            return any(isinstance(s, (ast.Break, ast.Return, ast.Raise)) for s in block[block.index(stmt) + 1:])
    return False


def _statements_before(ctx: FileContext, loop: ast.AST, scope: ast.AST) -> list[ast.stmt]:
    """Statements of ``scope`` that run before ``loop`` starts: earlier siblings of it and of its ancestors."""
    out: list[ast.stmt] = []
    child = loop
    for anc in ctx.ancestors(loop):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(anc, field, None)
            if isinstance(block, list) and child in block:
                out.extend(block[: block.index(child)])
                break
        if anc is scope:
            break
        child = anc
    return out


def _mode_before(ctx: FileContext, before: list[ast.stmt], text: str) -> str | None:
    """The mode ``text`` is in when the loop starts: its last switch, or 'train' when just constructed."""
    found = [((node.lineno, node.col_offset), mode) for mode, module, node in mode_events(ctx, before)
             if module == text]
    found += [((node.lineno, node.col_offset), "train") for node in ctx.walk_scope(before)
              if isinstance(node, ast.Assign) and len(node.targets) == 1 and src(ctx, node.targets[0]) == text
              and _constructs_module(ctx, node.value)]  # a new module is in train mode
    return max(found)[1] if found else None


def _constructs_module(ctx: FileContext, value: ast.AST) -> bool:
    """``Net(...)``, ``nn.Linear(...)``, optionally followed by ``.to(device)`` / ``.cuda()``."""
    while (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
           and value.func.attr in ("to", "cuda", "cpu", "float", "double", "half", "bfloat16")):
        value = value.func.value
    if not isinstance(value, ast.Call):
        return False
    if isinstance(value.func, ast.Name) and value.func.id in ctx.module_classes:
        return True
    qn = ctx.call_name(value)
    parts = (qn or "").split(".")
    return len(parts) >= 3 and parts[:2] == ["torch", "nn"] and parts[-1][:1].isupper() and parts[2] not in (
        "functional", "init", "utils")


def _handed_to_foreign_code(ctx: FileContext, body: list[ast.AST], text: str) -> bool:
    """Whether code this file does not define receives the module ``text`` (and might call ``train()``
    on it): as an argument (or an object holding it), or as the object of a method call on a holder
    (``agent.update()`` may switch ``agent.policy``)."""
    for node in ctx.walk_scope(body):
        if not isinstance(node, ast.Call) or local_callees(ctx, node) or mode_switch(ctx, node) is not None:
            continue
        qn = ctx.call_name(node)
        if qn is not None and qn.startswith(("torch.", "builtins.")):
            continue
        if isinstance(node.func, ast.Name) and node.func.id in HARMLESS_BUILTINS:
            continue
        if src(ctx, node.func) == text:
            continue  # calling the module: its forward
        if isinstance(node.func, ast.Attribute) and qn is None and text.startswith(src(ctx, node.func.value) + "."):
            return True
        for arg in [*node.args, *(kw.value for kw in node.keywords)]:
            arg_text = src(ctx, arg.value if isinstance(arg, ast.Starred) else arg)
            if text == arg_text or text.startswith(arg_text + "."):
                return True
    return False
