from __future__ import annotations

import ast
import re
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, argument, is_const
from torchpact.lint.project import SET_EPOCH
from torchpact.lint.rule import Hit, Rule, last_names

DIST_SAMPLERS = {"torch.utils.data.DistributedSampler"}
DATALOADERS = {"torch.utils.data.DataLoader"}
# Evaluation samplers: their order does not matter, so a fixed one is harmless.
_INSPECTING_BUILTINS = {"len", "print", "isinstance", "hasattr", "getattr", "type", "str", "repr", "id"}
_EVAL_NAME = re.compile(r"(^|_)(val|valid|validation|eval|evaluation|test|dev|predict)($|_)", re.I)


class DistributedSamplerWithoutSetEpoch(Rule):
    """A shuffling `DistributedSampler` is iterated epoch after epoch without `sampler.set_epoch(epoch)`.

    ## What it does
    Flags `DistributedSampler(...)` (shuffling: the default `shuffle=True`) when the loader built on
    it (or the sampler itself) is iterated inside an outer loop — an epoch loop, directly or by
    passing the loader to a function called in that loop — and `set_epoch` appears nowhere in the
    file. Loaders re-built inside the epoch loop are flagged too (a new sampler starts at epoch 0),
    unless the sampler gets a non-constant `seed=`. Samplers with `shuffle=False` and evaluation
    samplers (`val_sampler`, `test_dataset`, ...) are not flagged: their order does not matter.

    ## Why is this bad?
    `DistributedSampler` shuffles with a generator seeded by `seed + epoch`, and `epoch` only changes
    through `set_epoch`. Without it, torch 2.13 yields exactly the same permutation every epoch
    (`list(sampler)` is identical on every pass), so each rank sees the same shard in the same
    order every epoch: the "shuffling" happens once, and SGD loses the per-epoch reshuffle it relies
    on. Nothing warns about it.

    ## Fix safety
    No autofix: the epoch variable and where the epoch starts are not known to lint. Call
    `sampler.set_epoch(epoch)` (or `loader.sampler.set_epoch(epoch)`) at the start of each epoch,
    before the loader is iterated.
    """

    code = "TP501"
    category = Category.DATA
    severity = Severity.WARNING
    requires = (
        "the sampler is a resolved shuffling `DistributedSampler` whose loader is iterated inside an outer "
        "loop",
        "`set_epoch` appears nowhere in the file",
    )
    facts = ("sampler-replays-order-without-set-epoch",)
    message = ("a shuffling `DistributedSampler` is iterated every epoch without `set_epoch(epoch)`: "
               "every epoch replays the same order")
    fix_hint = "call `sampler.set_epoch(epoch)` at the start of every epoch, before iterating the loader"
    nodes = (ast.Call,)
    calls = last_names(DIST_SAMPLERS)
    triggers = ("DistributedSampler",)

    valid = [
        """
import torch
from torch.utils.data import DataLoader, DistributedSampler
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=32, sampler=sampler)
for epoch in range(10):
    sampler.set_epoch(epoch)
    for x, y in loader:
        train_step(x, y)
""",
        """
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
def main(dataset, model):
    loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset))
    for epoch in range(10):
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        train_one_epoch(model, loader)
""",
        """
import torch.utils.data as tud
sampler = tud.DistributedSampler(dataset, shuffle=False)
loader = tud.DataLoader(dataset, sampler=sampler)
for epoch in range(10):
    for batch in loader:
        step(batch)
""",
        """
import torch.utils.data as tud
val_sampler = tud.DistributedSampler(val_dataset)
val_loader = tud.DataLoader(val_dataset, sampler=val_sampler)
for epoch in range(10):
    evaluate(model, val_loader)
""",
        """
import torch.utils.data as tud
sampler = tud.DistributedSampler(dataset)
loader = tud.DataLoader(dataset, sampler=sampler)
for batch in loader:
    step(batch)
""",
        """
from torch.utils.data import DataLoader, DistributedSampler
for epoch in range(10):
    loader = DataLoader(dataset, sampler=DistributedSampler(dataset, seed=epoch))
    for batch in loader:
        step(batch)
""",
    ]
    invalid = [
        """
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=32, sampler=sampler)
for epoch in range(10):
    for x, y in loader:  # TODO: call set_epoch
        train_step(x, y)
""",
        """
import torch
from torch.utils.data import DataLoader, DistributedSampler
sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
loader = DataLoader(dataset, batch_size=32, sampler=sampler)
for epoch in range(10):
    for x, y in loader:
        train_step(x, y)
""",
        """
import torch.utils.data as tud
def main(args, model, dataset):
    train_loader = tud.DataLoader(dataset, batch_size=args.bs, sampler=tud.DistributedSampler(dataset, shuffle=True))
    for epoch in range(args.epochs):
        train_one_epoch(model, train_loader, epoch)
""",
        """
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
step = 0
while step < max_steps:
    loader = DataLoader(dataset, sampler=DistributedSampler(dataset, seed=0))
    for batch in enumerate(loader):
        step += 1
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if ctx.call_name(node) not in DIST_SAMPLERS:
            return
        shuffle = argument(node, "shuffle", 3)
        if shuffle is not None and not is_const(shuffle, True):
            return  # shuffle=False, or decided at run time
        if any(a.attr == "set_epoch" for a in ctx.nodes(ast.Attribute)) or any(
                isinstance(c, ast.Constant) and c.value == "set_epoch" for c in ctx.nodes(ast.Constant)):
            return  # set (or checked) somewhere: lint cannot tell which sampler, so trust it
        if any(ctx.calls_project_function_that(c, SET_EPOCH) for c in ctx.nodes(ast.Call)):
            return  # a helper in another module of the project sets it
        seed = argument(node, "seed", 4)
        if seed is not None and not isinstance(seed, ast.Constant) and ctx.in_loop(node):
            return  # re-seeded per epoch: a different permutation every time
        dataset = node.args[0] if node.args else argument(node, "dataset", 0)
        if dataset is not None and _is_eval_name(dataset):
            return
        scope = ctx.scope(node)
        samplers = _bound_names(node, ctx)
        if any(_EVAL_NAME.search(n) for n in samplers):
            return
        loaders: set[str] = set()
        for sub in ctx.walk_scope(scope if scope is not ctx.tree else ctx.tree.body):
            if isinstance(sub, ast.Call) and ctx.call_name(sub) in DATALOADERS:
                given = argument(sub, "sampler", 3)
                if given is node or (isinstance(given, ast.Name) and given.id in samplers):
                    if any(_EVAL_NAME.search(n) for n in _bound_names(sub, ctx)):
                        return
                    loaders |= _bound_names(sub, ctx)
        if _iterated_per_epoch(scope, samplers | loaders, ctx):
            yield self.hit(node, subject=next(iter(sorted(samplers or loaders)), None))


def _is_eval_name(expr: ast.AST) -> bool:
    name = expr.id if isinstance(expr, ast.Name) else expr.attr if isinstance(expr, ast.Attribute) else None
    return bool(name and _EVAL_NAME.search(name))


def _bound_names(call: ast.Call, ctx: FileContext) -> set[str]:
    """Names the value of ``call`` is assigned to (``x = call``, ``x = call if c else None``)."""
    cur: ast.AST = call
    parent = ctx.parent(cur)
    while isinstance(parent, ast.IfExp) and cur is not parent.test:
        cur, parent = parent, ctx.parent(parent)
    if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        return {t.id for t in targets if isinstance(t, ast.Name)}
    return set()


def _iterated_per_epoch(scope: ast.AST, names: set[str], ctx: FileContext) -> bool:
    """Whether one of ``names`` is iterated (or handed to a call) inside a loop of ``scope``."""
    if not names:
        return False
    body = scope.body if isinstance(getattr(scope, "body", None), list) else [scope]
    for sub in ctx.walk_scope(body):
        if isinstance(sub, (ast.For, ast.AsyncFor)) and ctx.in_loop(sub):
            if any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(sub.iter)):
                return True
        elif (isinstance(sub, ast.Call) and ctx.in_loop(sub)
              and not isinstance(ctx.parent(sub), (ast.For, ast.AsyncFor))):
            if ctx.call_name(sub) in DATALOADERS or (isinstance(sub.func, ast.Name)
                                                     and sub.func.id in _INSPECTING_BUILTINS):
                continue
            if any(isinstance(a, ast.Name) and a.id in names for a in [*sub.args, *(k.value for k in sub.keywords)]):
                return True
    return False
