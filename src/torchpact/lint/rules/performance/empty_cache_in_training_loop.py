from __future__ import annotations

import ast
import re
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.memory._training_loops import runs_every_iteration, step_loops

# torch.cuda / torch.xpu / torch.mps / torch.accelerator, and out-of-tree backends such as torch.npu
_EMPTY_CACHE = re.compile(r"^torch\.(cuda|xpu|mps|accelerator|npu|mlu|musa|hpu)(\.memory)?\.empty_cache$")


class EmptyCacheInTrainingLoop(Rule):
    """`torch.cuda.empty_cache()` runs on every training step.

    ## What it does
    Flags `torch.cuda.empty_cache()` (and `torch.xpu` / `torch.mps` / `torch.accelerator`'s) that
    runs unconditionally on every iteration of a training loop: a loop that calls `backward()` or
    `optimizer.step()` on a module that is the same object in every iteration. Calls under a
    condition (`if step % 1000 == 0:`), in an `except` handler (out-of-memory recovery), or outside
    the training loop (between epochs, after training) are not flagged, nor are loops over models or
    configurations: when each iteration back-propagates through a module it binds anew (a
    constructor, a factory call, `copy.deepcopy`, an item of the models or configs it iterates),
    `empty_cache()` returns the previous model's blocks, which the next model (other shapes) would
    not reuse, and no step of one training run pays for it. Models iterated round-robin inside an
    epoch loop are the same objects every epoch: there the epoch loop is the training loop.

    ## Why is this bad?
    `empty_cache()` only returns the caching allocator's *unused* blocks to the driver; memory held
    by live tensors is never freed by it, so it cannot prevent an out-of-memory error that the
    same step would otherwise hit. The next step needs the same blocks again, so the allocator must
    get them back with fresh `cudaMalloc` calls — and `cudaFree` synchronises the device — every
    step. The training becomes slower for nothing (the caching allocator exists to avoid exactly
    this). On torch 2.13 without CUDA initialised the call is a no-op, so the cost appears only on GPU.
    Fragmentation problems are better solved with
    `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.

    ## Fix safety
    No autofix: remove the call, or run it rarely (e.g. every few thousand steps, or between
    training and evaluation) if another process on the GPU really needs the cached memory.
    """

    code = "TP901"
    category = Category.PERFORMANCE
    severity = Severity.WARNING
    requires = (
        "the empty-cache call resolves to torch's and runs unconditionally in a loop that trains",
    )
    facts = ("empty-cache-frees-live-tensors",)
    message = ("`torch.cuda.empty_cache()` runs every training step: it frees no memory that is in use, "
               "and the allocator must `cudaMalloc` the same blocks again next step, slowing training")
    fix_hint = ("remove it (set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` against "
                "fragmentation), or call it rarely, outside the step")
    nodes = (ast.Call,)
    calls = frozenset({"empty_cache"})  # the last part of every name _EMPTY_CACHE matches
    triggers = ("empty_cache",)
    proof = ("needs CUDA: the cost is the cudaFree/cudaMalloc round trip on the GPU "
             "(tests/proofs/test_performance.py runs it when CUDA is available; without CUDA the call is a no-op)")

    valid = [
        """
import torch
for step, (x, y) in enumerate(loader):
    loss = criterion(model(x.cuda()), y.cuda())
    loss.backward()
    optimizer.step()
    if step % 1000 == 0:
        torch.cuda.empty_cache()
""",
        """
import torch
for epoch in range(10):
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    torch.cuda.empty_cache()
    evaluate(model)
""",
        """
import torch
for batch in loader:
    try:
        loss = model(batch).mean()
        loss.backward()
        optimizer.step()
    except torch.cuda.OutOfMemoryError:
        optimizer.zero_grad()
        torch.cuda.empty_cache()
""",
        """
import torch
for name, ckpt in checkpoints.items():
    model.load_state_dict(torch.load(ckpt))
    results[name] = evaluate(model)
    torch.cuda.empty_cache()
""",
        """
import torch

def sweep(x, widths):
    for width in widths:
        net = Net(width).cuda()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        loss = net(x).square().mean()
        loss.backward()
        opt.step()
        torch.cuda.empty_cache()
""",
        """
import torch

def smoke(batch):
    for arch in ("resnet18", "vit_tiny", "mlp"):
        model = build_model(arch)
        out = model(batch)
        out.mean().backward()
        torch.cuda.empty_cache()
""",
        """
import copy
import torch

def lr_search(base_model, x, y, rates, loss_fn):
    scores = {}
    for lr in rates:
        trial = copy.deepcopy(base_model)
        opt = torch.optim.Adam(trial.parameters(), lr=lr)
        loss = loss_fn(trial(x), y)
        loss.backward()
        opt.step()
        scores[lr] = loss.item()
        del trial, opt
        torch.cuda.empty_cache()
    return scores
""",
        """
import torch

def grads_flow(models, x):
    for m in models:
        m.zero_grad()
        m(x).sum().backward()
        assert all(p.grad is not None for p in m.parameters())
        torch.cuda.empty_cache()
""",
        """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

def check_all(configs, x, device):
    for key, cfg in configs.items():
        with torch.device(device):
            model = Classifier(**cfg).to(device)
        wrapped = DDP(model)
        wrapped(x).logsumexp(-1).mean().backward()
        torch.cuda.empty_cache()
""",
        """
import torch

def one_step(net, batch):
    net(batch).sum().backward()

def trial_runs(batch, seeds):
    for seed in seeds:
        torch.manual_seed(seed)
        net = Net()
        one_step(net, batch)
        torch.cuda.empty_cache()
""",
    ]
    invalid = [
        """
import torch
def train(model, optimizer, loader):
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        torch.cuda.empty_cache()
""",
        Invalid("""
from torch.cuda import empty_cache
import torch
for batch in loader:
    with torch.autocast("cuda"):
        loss = model(**batch).loss
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    del loss
    empty_cache()
    torch.accelerator.empty_cache()
""", count=2),
        Invalid("""
import torch
while step < max_steps:
    for micro in next(batches):
        model(micro).mean().backward()
        torch.cuda.empty_cache()
    optimizer.step()
    step += 1
""", severity=Severity.INFO),
        """
import torch

def train(model, loader, opt, device):
    for x, y in loader:
        model = model.to(device)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        torch.cuda.empty_cache()
""",
        """
import torch

def train(model, loader, opt):
    for batch in loader:
        fast = torch.compile(model)
        fast(batch).mean().backward()
        opt.step()
        opt.zero_grad()
        torch.cuda.empty_cache()
""",
        """
import torch

def train_ensemble(members, batch, opt, epochs):
    for epoch in range(epochs):
        for m in members:
            loss = m(batch).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            torch.cuda.empty_cache()
""",
        """
import torch

def train(zoo, loader, opt):
    for x in loader:
        net = zoo["main"]
        net(x).sum().backward()
        opt.step()
        torch.cuda.empty_cache()
""",
        """
import torch

def train(loader, opt):
    for i, x in enumerate(loader):
        if i == 0:
            model = Net().cuda()
        model(x).sum().backward()
        opt.step()
        torch.cuda.empty_cache()
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        name = ctx.call_name(node)
        if name is None or not _EMPTY_CACHE.match(name):
            return
        loops = step_loops(node, ctx)
        if loops and runs_every_iteration(node, loops[0], ctx):
            shown = ctx.locator.source(node.func)  # type: ignore[attr-defined]
            yield self.hit(node, message=self.message.replace("torch.cuda.empty_cache", shown), subject=shown)
