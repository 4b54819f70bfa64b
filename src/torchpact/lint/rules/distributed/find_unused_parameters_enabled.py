from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, is_const, keyword
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.distributed._util import DDP_CLASSES

# Wrappers that hand the flag straight to DistributedDataParallel.
FORWARDING = {
    "accelerate.DistributedDataParallelKwargs",
    "accelerate.utils.DistributedDataParallelKwargs",
    "accelerate.utils.dataclasses.DistributedDataParallelKwargs",
}
LIGHTNING_ROOTS = ("lightning.", "pytorch_lightning.", "lightning_fabric.")
UNUSED_STRATEGY = "ddp_find_unused_parameters_true"


class FindUnusedParametersEnabled(Rule):
    """`DistributedDataParallel(..., find_unused_parameters=True)` pays for an unused-parameter search every step.

    ## What it does
    Flags `find_unused_parameters=True` given to `DistributedDataParallel`, to Lightning's
    `DDPStrategy` / `strategy="ddp_find_unused_parameters_true"`, and to accelerate's
    `DistributedDataParallelKwargs` — all of which pass it to DDP. Calls that also set
    `static_graph=True` are not flagged. Advice (`info`): the flag is required when the set of
    parameters that get no gradient changes from one iteration to the next.

    Whether it is needed depends on the wrapped model's forward, so the advice is given only where
    the model is this code's own: a `DistributedDataParallel` of a module handed in by the caller (a
    parameter of the function, `module.to(rank)` of one, a loop over a parameter, or `self.model`
    that the class only ever binds to a parameter) is a generic wrapper. It must also serve models
    that leave parameters unused on some steps — a multi-task model whose forward runs only the
    current task's head — where DDP without the flag raises, so keeping it there is deliberate.

    ## Why is this bad?
    With the flag, after every forward DDP walks the autograd graph from the outputs to find the
    parameters that will get no gradient, and every backward all-reduces the "used" map of all
    parameters before the gradients: on torch 2.13 (2 gloo ranks, a model whose parameters are all
    used) the profiler counts 2 `gloo:all_reduce` calls per step instead of 1, and DDP logs "This
    flag results in an extra traversal of the autograd graph every iteration, which can adversely
    affect performance". Measured here (2 gloo ranks on a shared CPU, MLP forward + backward, median
    of interleaved runs): from no measurable difference up to 2x per step for models under 100k
    parameters, where one extra collective is a large share of a 1-8 ms step, and within noise
    (+-10%) for 0.5M-8M parameters. Without the flag, a parameter that gets no
    gradient makes the next forward raise "Expected to have finished reduction in the prior
    iteration before starting a new one" — so the flag is needed only when some parameters are
    really unused. When the unused set is the same every iteration (a frozen head, an unused
    branch), `static_graph=True` handles it with one all-reduce per step, as without the flag.

    ## Fix safety
    No autofix: whether the unused set is fixed (use `static_graph=True`), empty (drop the flag), or
    changes per iteration (keep it) depends on the model.
    """

    code = "TP604"
    category = Category.DISTRIBUTED
    severity = Severity.INFO
    requires = (
        "the call passes `find_unused_parameters=True` to DDP (or a strategy that forwards it) without "
        "`static_graph=True`",
        "for DDP itself: the wrapped module is not one the caller hands in (a parameter, or `self.model` bound only "
        "to one)",
    )
    facts = ("find-unused-parameters-costs-several-times",)
    message = ("`find_unused_parameters=True` makes DDP search the autograd graph and run an extra all-reduce "
               "on every step")
    fix_hint = ("drop it if every parameter gets a gradient; use `static_graph=True` if the unused set is the same "
                "every step")
    nodes = (ast.Call,)
    triggers = ("find_unused_parameters",)
    needs_torch_import = False

    valid = [
        """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
ddp = DDP(model, device_ids=[rank])
frozen = DDP(model_with_frozen_head, device_ids=[rank], static_graph=True)
""",
        """
from torch.nn.parallel import DistributedDataParallel as DDP
def wrap(model, find_unused_parameters=False):
    return DDP(model, find_unused_parameters=find_unused_parameters)
explicit = DDP(model, find_unused_parameters=False)
""",
        """
import lightning as L
from lightning.pytorch.strategies import DDPStrategy
trainer = L.Trainer(strategy=DDPStrategy(static_graph=True), devices=8)
""",
        """
from torch.nn import Module
from torch.nn.parallel import DistributedDataParallel

class DistributedHelper:
    def wrap_model(self, model: Module) -> Module:
        # multi-task models leave the other tasks' heads unused
        if self.is_distributed:
            if self.use_cuda:
                return DistributedDataParallel(model, device_ids=[self.device], find_unused_parameters=True)
            return DistributedDataParallel(model, find_unused_parameters=True)
        return model
""",
        """
import torch
def setup_ddp(network, rank):
    return torch.nn.parallel.DistributedDataParallel(
        network.to(rank), device_ids=[rank], output_device=rank, find_unused_parameters=True)
""",
        """
from torch.nn.parallel import DistributedDataParallel as DDP
def wrap_all(heads, rank):
    return {name: DDP(module=h, device_ids=[rank], find_unused_parameters=True) for name, h in heads.items()}
def wrap_each(nets):
    return [DDP(n, find_unused_parameters=True) for n in nets]
""",
        """
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

class Trainer:
    def __init__(self, model, corpus):
        self.model = model
        self.corpus = corpus

    def train(self, multi_gpu=False):
        if multi_gpu and dist.is_initialized():
            self.ddp_model = DistributedDataParallel(self.model, find_unused_parameters=True)
""",
    ]
    invalid = [
        """
import torch
import torch.nn as nn
ddp = nn.parallel.DistributedDataParallel(model, device_ids=[rank], find_unused_parameters=True)
""",
        """
from lightning.pytorch import Trainer
from lightning.pytorch.strategies import DDPStrategy
trainer = Trainer(strategy=DDPStrategy(find_unused_parameters=True), accelerator="gpu", devices=4)
""",
        """
import torch
from torch.nn.parallel import DistributedDataParallel
def setup_ddp(rank):
    network = Net().to(rank)
    return DistributedDataParallel(network, device_ids=[rank], find_unused_parameters=True)
""",
        """
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
ddp = DDP(module=nn.Sequential(nn.Linear(4, 4), nn.ReLU()), find_unused_parameters=True)
""",
        """
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

class Trainer:
    def __init__(self, cfg):
        self.model = build_model(cfg)

    def train(self, multi_gpu=False):
        if multi_gpu and dist.is_initialized():
            self.ddp_model = DistributedDataParallel(self.model, find_unused_parameters=True)
""",
        """
from torch.nn.parallel import DistributedDataParallel as DDP
def wrap(model, rank):
    model = TwoHeads().to(rank)
    return DDP(model, device_ids=[rank], find_unused_parameters=True)
""",
        Invalid(
            """
import pytorch_lightning as pl
from accelerate import Accelerator, DistributedDataParallelKwargs
trainer = pl.Trainer(strategy="ddp_find_unused_parameters_true", devices=2)
accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])
""",
            count=2,
        ),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        strategy = keyword(node, "strategy")
        if isinstance(strategy, ast.Constant) and strategy.value == UNUSED_STRATEGY:
            yield self.hit(strategy, subject=UNUSED_STRATEGY)
            return
        flag = keyword(node, "find_unused_parameters")
        if flag is None or not is_const(flag, True) or is_const(keyword(node, "static_graph"), True):
            return
        name = ctx.call_name(node) or ""
        if name in DDP_CLASSES:
            module = node.args[0] if node.args else keyword(node, "module")
            if module is not None and _handed_in(module, ctx):
                return  # a wrapper of whatever model it is given: it must work when some get no gradient
        if name in DDP_CLASSES or name in FORWARDING or (name.startswith(LIGHTNING_ROOTS)
                                                         and name.endswith(".DDPStrategy")):
            yield self.hit(node, subject="find_unused_parameters")


_RETURNS_SELF = {"to", "cuda", "cpu", "float", "half", "double", "bfloat16", "train"}


def _handed_in(module: ast.AST, ctx: FileContext) -> bool:
    """The module comes from the caller: a parameter of the function (``wrap(model)``), a loop over
    one, or an attribute whose every assignment in the class stores a parameter (``self.model = model``)."""
    while (isinstance(module, ast.Call) and isinstance(module.func, ast.Attribute)
           and module.func.attr in _RETURNS_SELF):
        module = module.func.value
    if not isinstance(module, (ast.Name, ast.Attribute)):
        return False
    binds = ctx.bindings(module)
    return bool(binds) and all(_from_caller(owner, value, ctx) for owner, value in binds)


def _from_caller(owner: ast.AST, value: ast.AST | None, ctx: FileContext) -> bool:
    if isinstance(owner, ast.arg):
        return owner.arg not in ("self", "cls")
    if isinstance(owner, (ast.For, ast.AsyncFor, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        while value is not None and not isinstance(value, ast.expr):  # unpacked / iterated: what is looped over
            value = getattr(value, "iterable", None) or getattr(value, "value", None)
        if (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                and value.func.attr in ("items", "values")):
            value = value.func.value
        return isinstance(value, ast.Name) and all(
            isinstance(o, ast.arg) and o.arg not in ("self", "cls") for o, _ in ctx.bindings(value))
    if isinstance(owner, (ast.Assign, ast.AnnAssign)) and isinstance(value, ast.Name):
        return all(isinstance(o, ast.arg) and o.arg not in ("self", "cls") for o, _ in ctx.bindings(value))
    return False
