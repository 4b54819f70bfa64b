from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, argument, is_const
from torchpact.lint.rule import Hit, Invalid, Rule

DATALOADERS = {"torch.utils.data.DataLoader"}
# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, drop_last)
POSITIONS = {"batch_size": 1, "shuffle": 2, "sampler": 3, "batch_sampler": 4, "drop_last": 8}

SAMPLER_ERROR = "sampler option is mutually exclusive with shuffle"
BATCH_SAMPLER_ERROR = "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last"


class DataloaderSamplerConflict(Rule):
    """`DataLoader` is given `shuffle=True` together with a `sampler`, or a `batch_sampler` together with `batch_size` / `shuffle` / `sampler` / `drop_last`.

    ## What it does
    Flags `DataLoader(...)` calls that pass `shuffle=True` and a `sampler` (or a `batch_sampler`),
    and calls that pass a `batch_sampler` together with a `batch_size` other than 1, `sampler=`, or
    `drop_last=True` — keyword or positional. A sampler that is literally `None` is not flagged. A
    sampler bound to `None` on one path and to a sampler on another (`DistributedSampler(ds) if
    distributed else None`) is flagged: that path raises.

    ## Why is this bad?
    The sampler decides the order; `shuffle` only chooses between the default `RandomSampler` and
    `SequentialSampler`, so the two cannot be combined. torch 2.13 raises at construction:
    `ValueError: sampler option is mutually exclusive with shuffle`, and with a batch sampler
    `ValueError: batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and
    drop_last` (note that `batch_size=None` counts too: only the default `1` is accepted). In
    distributed scripts the sampler branch often runs only on the cluster, so the crash shows up
    there first. To shuffle, let the sampler do it (`DistributedSampler(ds, shuffle=True)` is the
    default) and drop `shuffle=True`.

    ## Fix safety
    No autofix: whether the sampler already shuffles, or which of the two the author meant, is not
    visible from the call.
    """

    code = "TP502"
    category = Category.DATA
    severity = Severity.ERROR
    facts = ("dataloader-shuffle-with-sampler-raises",)
    message = "`DataLoader` gets `shuffle=True` and a `sampler`: torch raises `ValueError: sampler option is mutually exclusive with shuffle`"
    fix_hint = "drop `shuffle=True` and let the sampler shuffle (DistributedSampler shuffles by default), or pass `shuffle=sampler is None`"
    nodes = (ast.Call,)
    triggers = ("DataLoader",)

    valid = [
        """
import torch
from torch.utils.data import DataLoader, DistributedSampler
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=32, sampler=sampler, shuffle=False)
""",
        """
from torch.utils.data import DataLoader, DistributedSampler
def make_loader(dataset, distributed):
    sampler = DistributedSampler(dataset) if distributed else None
    return DataLoader(dataset, batch_size=32, shuffle=(sampler is None), sampler=sampler)
""",
        """
import torch.utils.data as data
loader = data.DataLoader(dataset, batch_size=8, shuffle=True, sampler=None)
batches = data.DataLoader(dataset, batch_sampler=data.BatchSampler(data.RandomSampler(dataset), 8, False), batch_size=1, drop_last=False)
""",
        """
from torch.utils.data import DataLoader
def build(dataset, sampler=None, **kwargs):
    return DataLoader(dataset, shuffle=True, sampler=sampler, **kwargs)
""",
    ]
    invalid = [
        """
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
loader = DataLoader(dataset, batch_size=32, shuffle=True, sampler=sampler)
""",
        """
import torch.utils.data as tud
def main(args, dataset):
    train_sampler = tud.DistributedSampler(dataset) if args.distributed else None
    return tud.DataLoader(dataset, args.batch_size, True, train_sampler)
""",
        Invalid(
            """
from torch.utils.data import BatchSampler, DataLoader, RandomSampler
batch_sampler = BatchSampler(RandomSampler(dataset), batch_size=16, drop_last=True)
loader = DataLoader(dataset, batch_size=16, batch_sampler=batch_sampler)
loader2 = DataLoader(dataset, batch_sampler=batch_sampler, shuffle=True, drop_last=True)
""",
            count=2,
        ),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if ctx.call_name(node) not in DATALOADERS:
            return
        args = {name: argument(node, name, pos) for name, pos in POSITIONS.items()}
        shuffle, sampler, batch_sampler = args["shuffle"], args["sampler"], args["batch_sampler"]
        if _may_be_sampler(batch_sampler, ctx):
            conflicts = []
            if shuffle is not None and _truthy_const(shuffle):
                conflicts.append("shuffle=True")
            if _may_be_sampler(sampler, ctx):
                conflicts.append("sampler")
            size = args["batch_size"]
            if isinstance(size, ast.Constant) and size.value != 1:
                conflicts.append(f"batch_size={size.value!r}")
            if args["drop_last"] is not None and is_const(args["drop_last"], True):
                conflicts.append("drop_last=True")
            if conflicts:
                yield self.hit(
                    node,
                    message=f"`DataLoader` gets a `batch_sampler` together with {', '.join(conflicts)}: torch raises "
                            f"`ValueError: {BATCH_SAMPLER_ERROR}`",
                    fix_hint="the batch sampler already decides batch size, order and dropping: pass only `batch_sampler=` "
                             "(set those options on the BatchSampler)",
                )
            return
        if shuffle is not None and _truthy_const(shuffle) and _may_be_sampler(sampler, ctx):
            yield self.hit(node, subject=ctx.segment(sampler) or None)


def _truthy_const(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is not None and bool(node.value)


def _may_be_sampler(expr: ast.AST | None, ctx: FileContext, seen: frozenset[int] = frozenset()) -> bool:
    """Whether ``expr`` is, on some path the file shows, something other than ``None``."""
    if expr is None or is_const(expr, None) or id(expr) in seen:
        return False
    seen = seen | {id(expr)}
    if isinstance(expr, ast.IfExp):
        return _may_be_sampler(expr.body, ctx, seen) or _may_be_sampler(expr.orelse, ctx, seen)
    if isinstance(expr, ast.Name):
        # a bare parameter or an unknown name: what the caller passes is not visible here
        return any(_may_be_sampler(v, ctx, seen) for _, v in ctx.bindings(expr) if v is not None)
    if isinstance(expr, ast.Constant):
        return False
    return True
