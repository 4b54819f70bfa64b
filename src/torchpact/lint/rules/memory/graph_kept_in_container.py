from __future__ import annotations

import ast
from typing import Iterator

from torchpact.lint.context import FileContext
from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.memory._container_lifetime import (
    back_propagated_before, constant_trips, differentiated_names, handed_to_caller, reset_inside,
)
from torchpact.lint.rules.memory._container_stores import (
    ADDERS, carries_graph, container_root, detached, is_bounded, is_container, local_and_kept, root_name, stored,
    varies_per_iteration,
)
from torchpact.lint.rules.memory._training_loops import step_loops


class GraphKeptInContainer(Rule):
    """A graph-attached tensor is stored in a list or dict that outlives the training-loop iteration.

    ## What it does
    Flags `losses.append(loss)`, `preds.append(model(x))`, `history.extend([...])`,
    `outs[step] = out` (and tuples or dicts holding such tensors) inside a training loop — one that
    calls `backward()` or `optimizer.step()` on a module that is the same object in every iteration,
    not a loop over models or configurations that builds or takes a new module in each iteration (one
    graph per model, as many as there are models) — when the value was computed with gradients enabled
    and still carries its `grad_fn` (`.cpu()`, `.to()`, `.float()` keep it), and the container is
    created outside the loop and nothing in the loop bounds it. A model that arrives as a parameter is
    known by its annotation or by what this file's calls of the function pass (`_train(Net(), ...)`).

    The condition it needs: a container is bounded when some path inside the iterations of the
    training loop re-creates it (`buf = []`, also under an `if` at a logging or accumulation
    boundary), empties or trims it (`buf.clear()`, `buf.pop(0)`, `del buf[:]`, `buf[:] = []`), or
    calls a helper of this file that does (a method that resets `self.buf`, a function given `buf`
    that clears it, one that re-binds it `global`); it then holds the graphs of the iterations
    between two resets, which the loop controls. A value carries a graph when it was computed with
    gradients on from something attached: a module call's output is attached when the module has
    parameters or its input is attached, so a parameter-free module (pooling, an activation,
    `Dropout`) applied to the batch itself stores no graph. Such containers, bounded `deque(maxlen=...)`s, containers
    whose contents are later back-propagated in the same function (`torch.stack(losses).sum().backward()`), and
    containers the function creates and returns (`return sum(losses)`: they live for one call, and the caller
    back-propagates them) are not flagged.

    A value stored after `backward()` ran through it in the same iteration (`loss.backward();
    optimizer.step(); losses.append(loss)`, also through `scaler.scale(loss).backward()`) keeps only
    its graph's nodes: backward already freed the saved activations. In a loop with a constant trip
    count (`for _ in range(5)`, over a literal list) that is a bounded leak, reported as `info`; in a
    loop of unknown length the node chains still grow every step and the warning stays, as it does for
    a value stored before its backward or never back-propagated.

    ## Why is this bad?
    Each stored tensor keeps its step's whole autograd graph reachable. On torch 2.13, until
    `backward()` runs through that graph, it also holds every activation the forward saved: in the
    proof, five stored outputs of a two-layer MLP kept alive all 20 tensors their forward passes
    saved, and none once they were stored with `.detach()`. After `backward()` the saved tensors are released, but
    the graph nodes themselves stay, one graph per step, so host memory still grows for the whole
    run. Only the numbers are ever used from such a list (logging, metrics), so keeping the graph
    buys nothing.

    ## Fix safety
    The fix stores `value.detach()`: the same tensor values, without a graph. It is offered only when
    the container is a local variable of this function that is not returned or yielded, and nothing
    in the function back-propagates through it; it is not offered for attributes such as
    `self.outputs`, whose other uses torchpact cannot see. `.item()` is the other choice when a
    Python number is wanted.
    """

    code = "TP102"
    category = Category.MEMORY
    severity = Severity.WARNING
    requires = (
        "the stored value is a graph-attached loss or model output computed with gradients on (resolved "
        "through dataflow)",
        "the loop back-propagates or steps an optimizer every iteration, and the container outlives the "
        "iteration",
    )
    message = ("a graph-attached tensor is kept in a container across training iterations: every "
               "step's autograd graph (and, until backward runs through it, its saved activations) "
               "stays alive and memory grows every step")
    fix_hint = "store `value.detach()` (or `value.item()` for a number)"
    nodes = (ast.Call, ast.Assign, ast.AugAssign)
    calls = frozenset(ADDERS)  # for the calls only: ``c.append(v)``...
    fixable = True
    facts = ("graph-kept-by-container",)

    valid = [
        """
import torch
losses = []
for x, y in loader:
    loss = criterion(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
""",
        """
import torch
for x, y in loader:
    outs = []
    for chunk in x.split(4):
        outs.append(model(chunk))
    loss = criterion(torch.cat(outs), y)
    loss.backward()
    optimizer.step()
""",
        """
import torch
def meta_step(model, optimizer, tasks):
    losses = []
    for task in tasks:
        loss = model(task).mean()
        losses.append(loss)
        optimizer.step()
    torch.stack(losses).mean().backward()
""",
        """
import torch
from torch import nn
def train(model: nn.Module, optimizer, loader):
    metrics = {}
    preds = []
    for step, (x, y) in enumerate(loader):
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        loss.backward()
        optimizer.step()
        metrics["loss"] = loss
        preds.append(out.argmax(1).cpu())
    return metrics, preds
""",
        """
import torch
def forward(self, x):
    hidden = []
    for layer in self.layers:
        x = layer(x)
        hidden.append(x)
    return x, hidden
""",
        """
import torch
import torch.nn.functional as F
def chunked_loss(model, anchors, positives, chunk, with_backward):
    losses = []
    for begin in range(0, len(anchors), chunk):
        loss = F.mse_loss(model(anchors[begin:begin + chunk]), positives[begin:begin + chunk])
        if with_backward:
            loss.backward()
            loss = loss.detach()
        losses.append(loss)
    total = sum(losses)
    return total
""",
        """
import torch.nn.functional as F
def fit(net, batches, opt):
    recent = []
    for n, (inp, tgt) in enumerate(batches):
        pred = net(inp)
        err = F.mse_loss(pred, tgt)
        err.backward()
        opt.step()
        recent.append(err)
        if n % 20 == 19:
            publish(recent)
            recent[:] = []
""",
    ]
    invalid = [
        Invalid(
            """
import torch
def train(model, optimizer, loader):
    losses = []
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss)
    print(sum(losses) / len(losses))
""",
            fixed="""
import torch
def train(model, optimizer, loader):
    losses = []
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    print(sum(losses) / len(losses))
""",
        ),
        Invalid(
            """
import torch.nn as nn
import torch.nn.functional as F
net = nn.Linear(4, 2)
from torch import optim
opt = optim.SGD(net.parameters(), lr=0.1)
preds, history = [], []
for epoch in range(3):
    for step, (x, y) in enumerate(loader):
        out = net(x)
        loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        preds.append(out.cpu())
        history.append({"step": step, "loss": loss})
""",
            fixed="""
import torch.nn as nn
import torch.nn.functional as F
net = nn.Linear(4, 2)
from torch import optim
opt = optim.SGD(net.parameters(), lr=0.1)
preds, history = [], []
for epoch in range(3):
    for step, (x, y) in enumerate(loader):
        out = net(x)
        loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        preds.append(out.cpu().detach())
        history.append({"step": step, "loss": loss.detach()})
""",
            count=2,
        ),
        Invalid(
            """
import torch
class Trainer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self.all_logits = {}

    def fit(self, loader):
        for i, batch in enumerate(loader):
            outputs = self.model(**batch)
            outputs.loss.backward()
            self.optimizer.step()
            self.all_logits[i] = outputs
""", severity=Severity.INFO),
        Invalid(
            """
import torch.nn.functional as F
def publish_only(store):
    publish(store)

def fit(net, batches, opt):
    recent = []
    for n, (inp, tgt) in enumerate(batches):
        err = F.l1_loss(net(inp), tgt)
        err.backward()
        opt.step()
        recent.append(err)
        if n % 20 == 19:
            publish_only(recent)
""",
            fixed="""
import torch.nn.functional as F
def publish_only(store):
    publish(store)

def fit(net, batches, opt):
    recent = []
    for n, (inp, tgt) in enumerate(batches):
        err = F.l1_loss(net(inp), tgt)
        err.backward()
        opt.step()
        recent.append(err.detach())
        if n % 20 == 19:
            publish_only(recent)
""",
        ),
        Invalid(
            """
import torch.nn.functional as F
def rebind_param(store):
    publish(store)
    store = []

def fit(net, batches, opt):
    recent = []
    for n, (inp, tgt) in enumerate(batches):
        err = F.l1_loss(net(inp), tgt)
        err.backward()
        opt.step()
        recent.append(err)
        if n % 20 == 19:
            rebind_param(recent)
""",
            fixed="""
import torch.nn.functional as F
def rebind_param(store):
    publish(store)
    store = []

def fit(net, batches, opt):
    recent = []
    for n, (inp, tgt) in enumerate(batches):
        err = F.l1_loss(net(inp), tgt)
        err.backward()
        opt.step()
        recent.append(err.detach())
        if n % 20 == 19:
            rebind_param(recent)
""",
        ),
        Invalid("""
import torch.nn.functional as F
class Loop:
    def restart_log(self):
        self.other_log = []

    def run(self, feed):
        self.seen_outputs = []
        for t, (obs, act) in enumerate(feed):
            logits = self.model(obs)
            pg = F.cross_entropy(logits, act)
            pg.backward()
            self.optim.step()
            self.seen_outputs.append(logits)
            if t % 64 == 0:
                self.restart_log()
""", severity=Severity.INFO),
        Invalid(
            """
import torch
def fit(net, source, opt):
    scores = []
    k = 0
    while k < 500:
        batch = next(source)
        out = net(batch)
        obj = out.pow(2).mean()
        opt.zero_grad()
        obj.backward()
        opt.step()
        scores.append(obj)
        k += 1
        if len(scores) >= 32:
            summary = scores[:]
""",
            fixed="""
import torch
def fit(net, source, opt):
    scores = []
    k = 0
    while k < 500:
        batch = next(source)
        out = net(batch)
        obj = out.pow(2).mean()
        opt.zero_grad()
        obj.backward()
        opt.step()
        scores.append(obj.detach())
        k += 1
        if len(scores) >= 32:
            summary = scores[:]
""",
        ),
        Invalid("""
import torch
from torch import nn
def fit(loader, opt, crit):
    backbone = nn.Conv2d(3, 8, 3)
    shrink = nn.AdaptiveAvgPool2d(1)
    pooled = []
    for images, labels in loader:
        feats = backbone(images)
        loss = crit(feats.mean((2, 3)), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        pooled.append(shrink(feats))
    print(len(pooled))
""", fixed="""
import torch
from torch import nn
def fit(loader, opt, crit):
    backbone = nn.Conv2d(3, 8, 3)
    shrink = nn.AdaptiveAvgPool2d(1)
    pooled = []
    for images, labels in loader:
        feats = backbone(images)
        loss = crit(feats.mean((2, 3)), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        pooled.append(shrink(feats).detach())
    print(len(pooled))
"""),
        Invalid("""
import torch.nn as nn
import torch.nn.functional as F
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
    def forward(self, x):
        return self.fc(x)
def _train(net, batches, opt):
    outs = []
    for x, y in batches:
        out = net(x)
        F.mse_loss(out, y).backward()
        opt.step()
        outs.append(out)
    print(len(outs))
_train(Net(), [], None)
""", fixed="""
import torch.nn as nn
import torch.nn.functional as F
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
    def forward(self, x):
        return self.fc(x)
def _train(net, batches, opt):
    outs = []
    for x, y in batches:
        out = net(x)
        F.mse_loss(out, y).backward()
        opt.step()
        outs.append(out.detach())
    print(len(outs))
_train(Net(), [], None)
""", evidence=Evidence.MAY),
        Invalid("""
import torch.nn as nn
import torch.nn.functional as F
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
    def forward(self, x):
        return self.fc(x)
def train(m, batches, opt):
    outs = []
    for x, y in batches:
        out = m(x)
        F.mse_loss(out, y).backward()
        opt.step()
        outs.append(out)
    print(len(outs))
train(Net(), [], None)
""", fixed="""
import torch.nn as nn
import torch.nn.functional as F
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
    def forward(self, x):
        return self.fc(x)
def train(m, batches, opt):
    outs = []
    for x, y in batches:
        out = m(x)
        F.mse_loss(out, y).backward()
        opt.step()
        outs.append(out.detach())
    print(len(outs))
train(Net(), [], None)
""", evidence=Evidence.MAY),  # other modules may call the public `train` with something else
        Invalid("""
import torch
import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
    def forward(self, x):
        return self.fc(x)
def _train(net, batches, opt, crit):
    losses = {}
    for i, (x, y) in enumerate(batches):
        loss = crit(net(x), y)
        loss.backward()
        opt.step()
        losses[i] = loss
    print(len(losses))
_train(torch.compile(Net()), [], None, nn.MSELoss())
""", fixed="""
import torch
import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
    def forward(self, x):
        return self.fc(x)
def _train(net, batches, opt, crit):
    losses = {}
    for i, (x, y) in enumerate(batches):
        loss = crit(net(x), y)
        loss.backward()
        opt.step()
        losses[i] = loss.detach()
    print(len(losses))
_train(torch.compile(Net()), [], None, nn.MSELoss())
""", evidence=Evidence.MAY),
        Invalid("""
import torch.nn as nn
class Loop:
    def __init__(self):
        self.model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 1))
        self.outputs = []
    def _epoch(self, m, xs, opt):
        for x in xs:
            y = m(x)
            y.mean().backward()
            opt.step()
            self.outputs.append(y)
    def run(self, xs, opt):
        self._epoch(self.model, xs, opt)
""", evidence=Evidence.MAY),
        Invalid("""
import torch
import torch.nn as nn
def main(batches, opt):
    def epoch(model):
        seen = []
        for x in batches:
            logits = model(x)
            logits.logsumexp(1).mean().backward()
            opt.step()
            seen.append(logits.cpu())
        print(len(seen))
    epoch(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)))
""", fixed="""
import torch
import torch.nn as nn
def main(batches, opt):
    def epoch(model):
        seen = []
        for x in batches:
            logits = model(x)
            logits.logsumexp(1).mean().backward()
            opt.step()
            seen.append(logits.cpu().detach())
        print(len(seen))
    epoch(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)))
""", evidence=Evidence.MAY),
        Invalid("""
import torch
from torch import nn

class Smoke:
    def run(self, model: nn.Module, inputs, labels):
        opt = torch.optim.SGD(model.parameters(), lr=100.0)
        self.losses = []
        for _ in range(5):
            opt.zero_grad()
            loss = model(inputs, labels=labels).loss
            loss.backward()
            opt.step()
            self.losses.append(loss)
        assert not torch.isclose(self.losses[0], self.losses[-1])

    def amp(self, model: nn.Module, scaler, x, y):
        opt = torch.optim.AdamW(model.parameters())
        self.seen = {}
        for step in range(0, 8, 2):
            total = nn.functional.mse_loss(model(x), y)
            scaler.scale(total).backward()
            scaler.step(opt)
            scaler.update()
            self.seen[step] = total.float()
        self.trace = []
        for lr in (0.1, 0.01):
            err = nn.functional.l1_loss(model(x), y)
            err.backward()
            opt.step()
            self.trace.append(err)
""", count=3, severity=Severity.INFO),
        Invalid("""
import torch
from torch import nn

class Loops:
    def before(self, model: nn.Module, opt, x, y):
        self.kept = []
        for _ in range(5):
            loss = nn.functional.mse_loss(model(x), y)
            self.kept.append(loss)
            loss.backward()
            opt.step()

    def unbounded(self, model: nn.Module, opt, loader):
        self.kept = []
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            self.kept.append(loss)

    def sometimes(self, model: nn.Module, opt, x, y, steps: int):
        self.kept = []
        for i in range(steps):
            loss = nn.functional.mse_loss(model(x), y)
            if i % 2:
                loss.backward()
                opt.step()
            self.kept.append(loss)
""", count=3),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        found = stored(node)
        if found is None:
            return
        container, values = found
        root = container_root(container)
        if root is None:
            return
        loops = step_loops(node, ctx)
        if not loops or ctx.grad_disabled(node):
            return
        outer = loops[-1]
        if isinstance(node, ast.Assign) and not varies_per_iteration(node.targets[0], loops[0], ctx):
            return  # metrics["loss"] = loss overwrites one slot: one graph kept, not one per step
        if reset_inside(container, root, outer, node, ctx):
            return
        if not is_container(root, ctx) or is_bounded(root, ctx):
            return
        scope = ctx.scope(node)
        if root_name(root) in differentiated_names(scope, ctx) or handed_to_caller(root, scope, ctx):
            return
        graph_values = [v for v in values if carries_graph(v, ctx)]
        if not graph_values:
            return
        fixable = isinstance(root, ast.Name) and local_and_kept(root.id, scope, ctx)
        edits = [ctx.locator.replace(v, detached(v, ctx)) for v in graph_values] if fixable else []
        if all(constant_trips(loop) for loop in loops) and all(
                back_propagated_before(v, node, loops[0], ctx) for v in graph_values):
            yield self.hit(node, subject=ctx.locator.source(container), edits=edits, severity=Severity.INFO,
                           message=("a tensor that backward already ran through is kept across the iterations "
                                    "of a loop with a constant trip count: its saved activations are freed, and "
                                    "the graph nodes kept are bounded by that count"))
            return
        yield self.hit(node, subject=ctx.locator.source(container), edits=edits)

