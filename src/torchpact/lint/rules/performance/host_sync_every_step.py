from __future__ import annotations

import ast
import re
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import GRAPH, LOSS, NUMBER, OUTPUT, FileContext, is_const, keyword
from torchpact.lint.rule import Hit, Rule
from torchpact.lint.rules.memory._training_loops import is_step_loop, runs_every_iteration, step_loops
from torchpact.lint.rules.performance._host_reads import synchronises_every_iteration

_TO_HOST = {"item", "tolist", "numpy", "cpu"}
_DEVICE_KINDS = {LOSS, OUTPUT, GRAPH}
# Tensor metadata lives on the host: reading it never waits for the device.
_METADATA = {"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad", "grad_fn", "layout",
             "size", "dim", "numel", "stride", "element_size", "data_ptr", "is_contiguous", "nelement"}
# Only code that runs on an accelerator pays for a sync; a CPU-only script has nothing to wait for.
_ACCELERATOR_WORDS = re.compile(r"cuda|device|accelerator|xla|\bmps\b|\.to\(\s*\w*dev")


class HostSyncEveryStep(Rule):
    """A device tensor is read on the host on every training step (`.item()`, `.cpu()`, `print(loss)`).

    ## What it does
    Flags, once per training loop (a loop that calls `backward()` or `optimizer.step()` on a module
    that is the same object in every iteration; not a loop over models or configurations that
    builds or takes a new module in each iteration), code that
    runs on every step and copies a tensor computed by the model to the host: `.item()`,
    `.tolist()`, `.numpy()`, `.cpu()`, `.to("cpu")`, `float(t)` / `int(t)` / `bool(t)`, or
    `print(t)` / an f-string of `t`. Reads under a condition (`if step % 100 == 0:`), in an
    `except` handler, or outside the training loop are not flagged, nor are files that never
    mention a device.

    ## Why is this bad?
    CUDA kernels run asynchronously: the Python loop normally queues the next step's work while the
    GPU is still busy with this one. Reading a value on the host needs the value to exist, so on
    torch 2.13 each of these calls blocks the CPU until the GPU has drained its queue (with
    `torch.cuda.set_sync_debug_mode("error")` each one raises "called a synchronizing CUDA
    operation"). Once per step, the CPU can no longer run ahead: data loading, Python overhead and
    kernel launches stop overlapping with GPU work. This is advice, not an error: one sync per step
    costs little when steps are long.

    Nor is a loop that already waits for the device on every iteration for a reason it cannot
    avoid: a read whose value the host needs to go on — the test of an `if` / `while` or an
    `assert` (`if loss.item() < best:`), or an argument of host-only code (a CPU library such as
    `scipy.optimize.linear_sum_assignment(cost.cpu().numpy())`, numpy, an environment's
    `env.step(action.cpu().numpy())`) — in the loop's body or in a function or module `forward` of
    this file that the body calls (a criterion that matches predictions on the CPU). There one more
    read for a log line adds a copy, not a new wait. Reads only recorded or shown (`print`,
    `append`, `+=`, a logger's `log` / `track_data`, `set_postfix`) are avoidable and do not count.
    A wait that happens in a caller of another module (an off-policy update run once per
    environment step, whose actions the caller brings back to the CPU) is not seen.

    What the read costs cannot be seen in the source: nothing there says how long a step is, or
    whether it already synchronises inside a library (exact Gaussian-process solves read values on
    the host every step), where a progress display such as `set_postfix(loss=loss.item())` adds no
    noticeable wait. No sharper condition was found (blind round 1: both sampled findings were such
    displays, right in letter, judged debatable), so this rule belongs to the preview set, off by
    default, once that exists.

    ## Fix safety
    No autofix. Accumulate on the device (`running += loss.detach()`) and read the value only when
    logging (`if step % log_every == 0: print(running.item() / log_every)`).
    """

    code = "TP902"
    category = Category.PERFORMANCE
    severity = Severity.INFO
    requires = (
        "the value copied to the host is computed by the model (resolved through dataflow) on every step of a"
        " training loop",
    )
    facts = ("item-waits-for-the-gpu",)
    message = ("a device tensor is read on the host on every training step: each read waits for the GPU "
               "to finish all queued work, so the CPU cannot run ahead of it")
    fix_hint = ("keep running values on the device (`running += loss.detach()`) and read them only when "
                "logging, e.g. under `if step % 100 == 0:`")
    nodes = (ast.For, ast.AsyncFor, ast.While)
    triggers = ("item", "cpu", "tolist", "numpy", "print", "float(", "int(", "bool(")
    proof = ("needs CUDA: the sync is a wait on the GPU queue (tests/proofs/test_performance.py checks it with "
             "torch.cuda.set_sync_debug_mode when CUDA is available)")

    valid = [
        """
import torch
device = torch.device("cuda")
running = torch.zeros((), device=device)
for step, (x, y) in enumerate(loader):
    loss = criterion(model(x.to(device)), y.to(device))
    loss.backward()
    optimizer.step()
    running += loss.detach()
    if step % 100 == 0:
        print(f"loss {running.item() / 100:.3f}")
        running.zero_()
""",
        """
import torch
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    print(loss.item())
""",
        """
import torch
device = "cuda"
for epoch in range(10):
    for x, y in loader:
        loss = criterion(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: {loss.item():.3f}")
    labels = y.tolist()
""",
        """
import torch

def compare(configs, x):
    x = x.to("cuda")
    for tag, cfg in configs.items():
        model = Net(**cfg).to("cuda")
        loss = model(x).mean()
        loss.backward()
        print(tag, loss.item())
""",
        """
import copy
import torch

def restart_losses(base, x, n):
    losses = []
    for _ in range(n):
        replica = copy.deepcopy(base).cuda()
        loss = replica(x.cuda()).sum()
        loss.backward()
        losses.append(loss.item())
    return losses
""",
        """
import torch
from scipy.optimize import linear_sum_assignment

class MatchingLoss(torch.nn.Module):
    def forward(self, pred, target):
        cost = torch.cdist(pred, target)
        rows, cols = linear_sum_assignment(cost.detach().cpu().numpy())
        return (pred[rows] - target[cols]).pow(2).mean()

criterion = MatchingLoss()
running = 0.0
for x, y in loader:
    loss = criterion(model(x.to("cuda")), y.to("cuda"))
    loss.backward()
    optimizer.step()
    running += loss.item()
""",
        """
import torch
def rollout_and_learn(policy, env, opt, steps, device):
    obs = env.reset()
    losses = []
    for _ in range(steps):
        action, logp = policy(torch.as_tensor(obs, device=device))
        obs, reward, done, info = env.step(action.cpu().numpy())
        loss = -(logp * reward).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
""",
        """
import torch
best, step = float("inf"), 0
while step < max_steps:
    out = net(batch.to(device))
    loss = out.pow(2).mean()
    loss.backward()
    optim.step()
    step += 1
    if loss.item() < best:
        best = loss.item()
        torch.save(net.state_dict(), "best.pt")
""",
        """
import numpy as np
import torch

def hardest(scores):
    return np.argsort(scores.to("cpu").numpy())[-8:]

def train(model, loader, optimizer):
    for x in loader:
        scores = model(x.cuda())
        picked = hardest(scores.detach())
        loss = scores[picked].mean()
        loss.backward()
        optimizer.step()
        print(f"loss {loss.item():.4f}")
""",
        """
import torch
for epoch in range(3):
    for x, y in loader:
        logits = classifier(x.to("cuda"))
        loss = torch.nn.functional.cross_entropy(logits, y.to("cuda"))
        assert torch.isfinite(loss).item(), "diverged"
        loss.backward()
        opt.step()
        meter.update(loss.item())
""",
    ]
    invalid = [
        """
import torch
def train(model, optimizer, loader, device):
    total = 0.0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
        preds = model(x).argmax(1).cpu().numpy()
    return total
""",
        """
import torch.nn as nn
from torch import optim
net = nn.Linear(4, 2).cuda()
opt = optim.SGD(net.parameters(), lr=0.1)
for step, batch in enumerate(loader):
    out = net(batch.cuda())
    loss = out.pow(2).mean()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss}")
""",
        """
import torch
for batch in loader:
    outputs = model(**{k: v.to("cuda") for k, v in batch.items()})
    accelerator.backward(outputs.loss)
    optimizer.step()
    history.append(float(outputs.loss))
""",
        """
import torch

class SoftMatchingLoss(torch.nn.Module):
    def forward(self, pred, target):
        weights = torch.softmax(-torch.cdist(pred, target), dim=1)
        return (pred - weights @ target).pow(2).mean()

criterion = SoftMatchingLoss()
running = 0.0
for x, y in loader:
    loss = criterion(model(x.to("cuda")), y.to("cuda"))
    loss.backward()
    optimizer.step()
    running += loss.item()
""",
        """
import torch
def learn(policy, batches, opt, device):
    losses = []
    for obs, reward in batches:
        action, logp = policy(obs.to(device))
        loss = -(logp * reward.to(device)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
""",
        """
import torch
best, step = float("inf"), 0
while step < max_steps:
    out = net(batch.to(device))
    loss = out.pow(2).mean()
    loss.backward()
    optim.step()
    step += 1
    history.append(loss.item())
    if step % 100 == 0:
        if loss.item() < best:
            best = loss.item()
""",
        """
import torch

def show(scores):
    writer.add_histogram("scores", scores.to("cpu").numpy())

def train(model, loader, optimizer):
    for x in loader:
        scores = model(x.cuda())
        show(scores.detach())
        loss = scores.mean()
        loss.backward()
        optimizer.step()
        print(f"loss {loss.item():.4f}")
""",
        """
import torch

def train(model, loader, opt):
    for x in loader:
        model = model.cuda()
        loss = model(x.cuda()).mean()
        loss.backward()
        opt.step()
        print(loss.item())
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        if not is_step_loop(node, ctx) or not _mentions_accelerator(ctx):
            return
        sites: list[ast.AST] = []
        seen_statements: set[int] = set()
        for n in ctx.walk_scope(node.body):  # type: ignore[attr-defined]
            if not _is_sync(n, ctx):
                continue
            loops = step_loops(n, ctx)
            if not loops or loops[0] is not node or not runs_every_iteration(n, node, ctx):
                continue
            stmt = ctx.statement(n)
            if id(stmt) in seen_statements:
                continue  # ``out.cpu().numpy()`` is one copy
            seen_statements.add(id(stmt))
            sites.append(n)
        if not sites or synchronises_every_iteration(node, ctx):
            return  # no read, or the loop waits for the device every iteration anyway
        first = sites[0]
        text = _short(ctx.locator.source(first))
        more = f" ({len(sites)} such reads in this loop)" if len(sites) > 1 else ""
        message = (f"`{text}` reads a device tensor on the host on every training step{more}: each read "
                   "waits for the GPU to finish all queued work, so the CPU cannot run ahead of it")
        yield self.hit(first, message=message, subject=text)


def _mentions_accelerator(ctx: FileContext) -> bool:
    cached = getattr(ctx.tree, "_tp_mentions_accelerator", None)
    if cached is None:
        cached = bool(_ACCELERATOR_WORDS.search(ctx.source.text))
        ctx.tree._tp_mentions_accelerator = cached  # type: ignore[attr-defined]
    return cached


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


def _is_sync(node: ast.AST, ctx: FileContext) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        if func.attr in _TO_HOST and not node.args and not node.keywords:
            return _on_device(func.value, ctx)
        if func.attr == "to" and _to_cpu(node):
            return _on_device(func.value, ctx)
        return False
    if isinstance(func, ast.Name):
        if func.id in ("float", "int", "bool") and len(node.args) == 1 and not node.keywords:
            return _on_device(node.args[0], ctx)
        if func.id == "print":
            for arg in node.args:
                parts = ([v.value for v in arg.values if isinstance(v, ast.FormattedValue)]
                         if isinstance(arg, ast.JoinedStr) else [arg])
                if any(isinstance(p, (ast.Name, ast.Attribute, ast.Subscript)) and _on_device(p, ctx) for p in parts):
                    return True
    return False


def _to_cpu(call: ast.Call) -> bool:
    target = call.args[0] if call.args else keyword(call, "device")
    return is_const(target, "cpu")


def _on_device(expr: ast.AST, ctx: FileContext) -> bool:
    """Whether ``expr`` is a tensor computed on the device by the model (or from its outputs)."""
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Attribute):
            if func.attr in _TO_HOST or func.attr in _METADATA or (func.attr == "to" and _to_cpu(expr)):
                return False  # already on the host
            return _on_device(func.value, ctx) or _device_kinds(expr, ctx)
        return _device_kinds(expr, ctx)
    if isinstance(expr, ast.Subscript):
        return _on_device(expr.value, ctx)
    if isinstance(expr, ast.Attribute):
        if expr.attr in _METADATA:
            return False
        return _device_kinds(expr, ctx) or _on_device(expr.value, ctx)
    if isinstance(expr, ast.BinOp):
        return _on_device(expr.left, ctx) or _on_device(expr.right, ctx)
    if isinstance(expr, ast.Compare):
        return any(_on_device(e, ctx) for e in [expr.left, *expr.comparators])
    if isinstance(expr, ast.UnaryOp):
        return _on_device(expr.operand, ctx)
    if isinstance(expr, ast.Name):
        return _device_kinds(expr, ctx)
    return False


def _device_kinds(expr: ast.AST, ctx: FileContext) -> bool:
    kinds = ctx.kinds(expr)
    return bool(kinds & _DEVICE_KINDS) and NUMBER not in kinds
