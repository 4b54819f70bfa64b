from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import GRAPH, LOSS, OUTPUT, FileContext
from torchpact.lint.rule import Hit, Invalid, Rule


class GraphAccumulatedAcrossIterations(Rule):
    """A tensor attached to the autograd graph is summed into a running total across loop iterations.

    ## What it does
    Flags `total += loss` (or `total = total + loss`) inside a loop that calls `.backward()` every
    iteration, when `loss` was computed with gradients enabled and `total` is never the target of
    `.backward()` in the same function.

    The condition it needs: the total carries graphs from one iteration of the loop that
    back-propagates into the next, and nothing in that loop bounds how many. A running total is
    bounded when it is re-bound, on some path inside the iterations of that loop, to a value
    without the graph (`running = 0`, `running = torch.zeros(())`, `running = running.detach()`),
    deleted (`del running`), or re-bound by a helper the loop calls (a function that declares it
    `global`). Such a total is not flagged, whether the reset runs on every iteration (`running = 0`
    at the top of each step) or on some (at the optimizer-step boundary,
    `if (i + 1) % accum == 0: ... running = 0`, or after logging): it holds the graphs of the
    iterations between two resets.
    A total reset only by an enclosing loop (per epoch) is a bounded leak that can still be long,
    reported as `info`; one that no loop resets is an `error`.

    ## Why is this bad?
    `loss` carries its `grad_fn`, so `total` becomes a tensor whose graph links every iteration's
    graph: after N steps `total.grad_fn` reaches N forward graphs and all their saved activations.
    `backward()` on each step's loss frees only that step's saved tensors' *use*, not the references
    `total` holds to the graph nodes, so memory grows every step until the process runs out (on
    torch 2.13, `total.grad_fn` chains one `AddBackward0` per iteration). Intended accumulation of a
    loss that is then back-propagated (gradient accumulation) is not flagged.

    ## Fix safety
    The fix adds `.detach()` to the accumulated value: same numbers, same tensor type, no graph. It is
    safe unless the total is differentiated outside this function (torchpact checked it is not
    within it). `.item()` is the other choice when a Python float is wanted.
    """

    code = "TP101"
    category = Category.MEMORY
    severity = Severity.ERROR
    message = ("a graph-attached tensor is accumulated across iterations: every step's autograd graph stays alive "
               "and memory grows until OOM")
    fix_hint = "accumulate `loss.detach()` or `loss.item()` instead"
    nodes = (ast.AugAssign, ast.Assign)
    fixable = True
    facts = ("graph-kept-by-accumulator",)
    requires = (
        "the accumulated value is a graph-attached loss or model output (resolved through dataflow)",
        "a loop around the accumulation calls `.backward()`",
        "the running total is not reset inside that loop, nor back-propagated",
    )

    valid = [
        """
import torch
total = 0.0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total += loss.item()
""",
        """
import torch
for batch in loader:
    loss = 0
    for micro in batch:
        loss += criterion(model(micro), micro)
    loss.backward()
""",
        """
import torch
total = 0
with torch.no_grad():
    for x, y in loader:
        loss = criterion(model(x), y)
        total += loss
""",
        """
import torch.nn.functional as F
for x, y in loader:
    running = 0
    for part in x.split(8):
        running += F.cross_entropy(model(part), y)
    running.backward()
    optimizer.step()
""",
        """
import torch.nn.functional as F
def train(model, loader, optimizer):
    for x, y in loader:
        running = 0
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        running = running + loss
        log(running)
""",
        """
import torch.nn.functional as F
def fit(net, batches, opt, accum_steps):
    acc_loss = 0.0
    for i, (inp, tgt) in enumerate(batches):
        part = F.mse_loss(net(inp), tgt) / accum_steps
        part.backward()
        acc_loss += part
        if (i + 1) % accum_steps == 0:
            opt.step()
            opt.zero_grad()
            report(acc_loss)
            acc_loss = 0.0
""",
        """
import torch
import torch.nn.functional as F
def fit(net, stream, opt, every):
    window = torch.zeros(())
    seen = 0
    while seen < 1000:
        xb, yb = next(stream)
        err = F.l1_loss(net(xb), yb)
        opt.zero_grad()
        err.backward()
        opt.step()
        window = window + err
        seen += 1
        if seen % every == 0:
            report(window / every)
            del window
            window = torch.zeros((), dtype=torch.float32)
""",
        """
import torch.nn.functional as F
epoch_sum = 0

def flush():
    global epoch_sum
    report(epoch_sum)
    epoch_sum = 0

for k, (a, b) in enumerate(pairs):
    cost = F.smooth_l1_loss(regressor(a), b)
    cost.backward()
    sgd.step()
    epoch_sum += cost
    if k % 50 == 49:
        flush()
""",
        """
import torch
import torch.nn.functional as F
def fit(clf, items, adam):
    tally = torch.zeros(1)
    for step, (img, lbl) in enumerate(items):
        adam.zero_grad()
        ce = F.cross_entropy(clf(img), lbl)
        ce.backward()
        adam.step()
        tally += ce
        if step % 100 == 0:
            writer.add_scalar("loss", tally / 100, step)
            tally = torch.zeros(1)
""",
        """
import torch.nn.functional as F
def fit(lm, chunks, opt):
    carry = 0
    for tokens, nxt in chunks:
        nll = F.nll_loss(lm(tokens), nxt)
        nll.backward()
        opt.step()
        carry = carry + nll
        if carry > 100:
            carry = carry.detach()
""",
    ]
    invalid = [
        Invalid(
            """
import torch
total = 0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total += loss
""",
            fixed="""
import torch
total = 0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total += loss.detach()
""",
            severity=Severity.WARNING,  # the loss is graph-attached because `.backward()` is called on it
            evidence=Evidence.MAY,
        ),
        Invalid(
            """
import torch.nn.functional as F
running = 0
for x, y in loader:
    out = model(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    running = running + loss * x.size(0)
""",
            fixed="""
import torch.nn.functional as F
running = 0
for x, y in loader:
    out = model(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    running = running + (loss * x.size(0)).detach()
""",
            severity=Severity.WARNING,
        ),
        Invalid(
            """
import torch
total = 0
for batch in loader:
    outputs = model(**batch)
    loss = outputs.loss
    accelerator.backward(loss)
    optimizer.step()
    total += loss
""",
            fixed="""
import torch
total = 0
for batch in loader:
    outputs = model(**batch)
    loss = outputs.loss
    accelerator.backward(loss)
    optimizer.step()
    total += loss.detach()
""",
            severity=Severity.WARNING,
        ),
        Invalid(
            """
import torch.nn.functional as F
for epoch in range(10):
    epoch_loss = 0
    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        epoch_loss += loss
    print(epoch_loss / len(loader))
""",
            fixed="""
import torch.nn.functional as F
for epoch in range(10):
    epoch_loss = 0
    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        epoch_loss += loss.detach()
    print(epoch_loss / len(loader))
""",
            severity=Severity.INFO,
        ),
        Invalid(
            """
import torch.nn.functional as F
def fit(net, batches, opt, accum_steps):
    acc_loss = 0.0
    for i, (inp, tgt) in enumerate(batches):
        part = F.mse_loss(net(inp), tgt) / accum_steps
        part.backward()
        acc_loss += part
        if (i + 1) % accum_steps == 0:
            opt.step()
            opt.zero_grad()
            report(acc_loss)
            count = 0
""",
            fixed="""
import torch.nn.functional as F
def fit(net, batches, opt, accum_steps):
    acc_loss = 0.0
    for i, (inp, tgt) in enumerate(batches):
        part = F.mse_loss(net(inp), tgt) / accum_steps
        part.backward()
        acc_loss += part.detach()
        if (i + 1) % accum_steps == 0:
            opt.step()
            opt.zero_grad()
            report(acc_loss)
            count = 0
""",
            severity=Severity.WARNING,
            evidence=Evidence.MAY,
        ),
        # Evidence: every value resolved through dataflow (error); the model on one branch only
        # (warning); the model a parameter known by its name only (info).
        Invalid(
            """
import torch
import torch.nn as nn
net = nn.Linear(4, 1)
criterion = nn.MSELoss()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
total = 0
for step in range(10):
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    opt.zero_grad()
    loss = criterion(net(x), y)
    loss.backward()
    opt.step()
    total += loss
""",
            fixed="""
import torch
import torch.nn as nn
net = nn.Linear(4, 1)
criterion = nn.MSELoss()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
total = 0
for step in range(10):
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    opt.zero_grad()
    loss = criterion(net(x), y)
    loss.backward()
    opt.step()
    total += loss.detach()
""",
            evidence=Evidence.MUST,
        ),
        Invalid(
            """
import torch
import torch.nn.functional as F
def fit(net, stream, opt):
    window = torch.zeros(())
    seen = 0
    while seen < 1000:
        xb, yb = next(stream)
        err = F.l1_loss(net(xb), yb)
        opt.zero_grad()
        err.backward()
        opt.step()
        window = window + err
        seen += 1
""",
            fixed="""
import torch
import torch.nn.functional as F
def fit(net, stream, opt):
    window = torch.zeros(())
    seen = 0
    while seen < 1000:
        xb, yb = next(stream)
        err = F.l1_loss(net(xb), yb)
        opt.zero_grad()
        err.backward()
        opt.step()
        window = window + err.detach()
        seen += 1
""",
            severity=Severity.WARNING,
            evidence=Evidence.MAY,
        ),
        Invalid(
            """
import torch.nn.functional as F
epoch_sum = 0

def flush(total):
    report(total)
    total = 0

for k, (a, b) in enumerate(pairs):
    cost = F.smooth_l1_loss(regressor(a), b)
    cost.backward()
    sgd.step()
    epoch_sum += cost
    if k % 50 == 49:
        flush(epoch_sum)
""",
            fixed="""
import torch.nn.functional as F
epoch_sum = 0

def flush(total):
    report(total)
    total = 0

for k, (a, b) in enumerate(pairs):
    cost = F.smooth_l1_loss(regressor(a), b)
    cost.backward()
    sgd.step()
    epoch_sum += cost.detach()
    if k % 50 == 49:
        flush(epoch_sum)
""",
            severity=Severity.WARNING,
            evidence=Evidence.MAY,
        ),
        Invalid(
            """
import torch.nn.functional as F
def fit(lm, chunks, opt):
    carry = 0
    for tokens, nxt in chunks:
        nll = F.nll_loss(lm(tokens), nxt)
        nll.backward()
        opt.step()
        carry = carry + nll
        if carry > 100:
            carry = carry * 0.5
""",
            fixed="""
import torch.nn.functional as F
def fit(lm, chunks, opt):
    carry = 0
    for tokens, nxt in chunks:
        nll = F.nll_loss(lm(tokens), nxt)
        nll.backward()
        opt.step()
        carry = carry + nll.detach()
        if carry > 100:
            carry = carry * 0.5
""",
            severity=Severity.WARNING,
            evidence=Evidence.MAY,
        ),
        Invalid(
            """
import torch
import torch.nn as nn
def train(batches, wide, opt):
    head = nn.Linear(4, 1) if wide else load_head()
    seen = 0
    for x in batches:
        score = head(x).mean()
        score.backward()
        opt.step()
        seen += head(x)
""",
            fixed="""
import torch
import torch.nn as nn
def train(batches, wide, opt):
    head = nn.Linear(4, 1) if wide else load_head()
    seen = 0
    for x in batches:
        score = head(x).mean()
        score.backward()
        opt.step()
        seen += head(x).detach()
""",
            severity=Severity.WARNING,
            evidence=Evidence.MAY,
        ),
        Invalid(
            """
import torch
def train(model, loader, optimizer, criterion):
    score_sum = 0
    for x, y in loader:
        scores = model(x)
        loss = criterion(scores, y)
        loss.backward()
        optimizer.step()
        score_sum += scores.mean()
""",
            fixed="""
import torch
def train(model, loader, optimizer, criterion):
    score_sum = 0
    for x, y in loader:
        scores = model(x)
        loss = criterion(scores, y)
        loss.backward()
        optimizer.step()
        score_sum += scores.mean().detach()
""",
            severity=Severity.INFO,
            evidence=Evidence.UNRESOLVED,
        ),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        if isinstance(node, ast.AugAssign):
            if not isinstance(node.op, ast.Add) or not isinstance(node.target, ast.Name):
                return
            target, value, read = node.target, node.value, node.target
        else:
            assert isinstance(node, ast.Assign)
            if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
                return
            b = node.value
            if not (isinstance(b, ast.BinOp) and isinstance(b.op, ast.Add) and isinstance(b.left, ast.Name)
                    and b.left.id == node.targets[0].id):
                return
            target, value, read = node.targets[0], b.right, b.left
        loops = ctx.enclosing_loops(node)
        if not loops or ctx.grad_disabled(node):
            return
        # Only a loop that back-propagates each iteration frees its graphs per iteration; summing
        # inside a forward (residuals, auxiliary losses) is what the graph is for.
        training = next((loop for loop in loops if _calls_backward(loop, ctx)), None)
        if training is None:
            return
        kinds = ctx.kinds(value)
        if GRAPH not in kinds or not kinds & {LOSS, OUTPUT}:
            return
        if target.id in ctx.backward_names(ctx.scope(node)):
            return  # gradient accumulation: the total is what gets back-propagated
        # Where the running total was last set: a reset in the training loop itself, at the top of
        # each step or on some of its paths (``if (i + 1) % accum == 0: running = 0``), bounds it to
        # the iterations between two resets, which the loop controls; a reset in an enclosing loop
        # (per epoch) bounds it to that loop's iteration, which may be long.
        carried = [owner for owner, _ in ctx.bindings(read)
                   if owner is not node and training not in ctx.ancestors(owner)]
        if ctx.bindings(read) and not carried:
            return
        if _reset_inside(target.id, training, node, ctx):
            return
        outer = loops[loops.index(training) + 1:]
        bounded = bool(carried) and all(any(loop in ctx.ancestors(o) for loop in outer) for o in carried)
        text = ctx.locator.source(value)
        simple = isinstance(value, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
        replacement = f"{text}.detach()" if simple else f"({text}).detach()"
        if bounded:
            yield self.hit(node, subject=target.id, edits=[ctx.locator.replace(value, replacement)],
                           severity=Severity.INFO, evidence=Evidence.MUST,
                           message=("a graph-attached tensor is accumulated across iterations: every step's autograd "
                                    "graph stays alive until the total is reset in the enclosing loop, so peak memory "
                                    "grows with that loop's length"))
            return
        yield self.hit(node, subject=target.id, edits=[ctx.locator.replace(value, replacement)], evidence=Evidence.MUST)


def _calls_backward(loop: ast.AST, ctx: FileContext) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward"
               for n in ctx.walk_scope(loop))


def _reset_inside(name: str, loop: ast.AST, accumulation: ast.AST, ctx: FileContext) -> bool:
    """Whether some path of an iteration of ``loop`` drops the graph the total ``name`` holds: it is
    re-bound to a value without that graph, deleted, or re-bound by a local helper through ``global``."""
    helpers: list[ast.AST] = []
    for other in ctx.walk_scope(loop.body):  # type: ignore[attr-defined]
        if other is accumulation:
            continue
        if isinstance(other, ast.Delete) and any(isinstance(t, ast.Name) and t.id == name for t in other.targets):
            return True
        if isinstance(other, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and other.value is not None:
            targets = other.targets if isinstance(other, ast.Assign) else [other.target]
            rebound = any(isinstance(t, ast.Name) and t.id == name for tg in targets for t in ast.walk(tg))
            if rebound and (not _mentions(other.value, name) or GRAPH not in ctx.kinds(other.value)):
                return True
        if isinstance(other, ast.Call) and isinstance(other.func, ast.Name):
            helpers += ctx.functions.get(other.func.id, [])
    return any(_rebinds_global(fn, name) for fn in helpers)


def _mentions(expr: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(expr))


def _rebinds_global(fn: ast.AST, name: str) -> bool:
    """A helper that declares ``global name`` (or ``nonlocal``) and assigns or deletes it."""
    body = list(ast.walk(fn))
    if not any(isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names for n in body):
        return False
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, (ast.Store, ast.Del)) for n in body)
