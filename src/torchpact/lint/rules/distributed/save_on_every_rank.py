from __future__ import annotations

import ast
import re
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, argument, mentions_rank
from torchpact.lint.rule import Hit, Rule, last_names
from torchpact.lint.rules.distributed._util import (DDP_CLASSES, FSDP_CLASSES, INIT_PROCESS_GROUP, in_rank_guard,
                                                    is_multiprocess_script)

SAVES = {"torch.save", "torch.serialization.save"}
PER_RANK_SETUP = DDP_CLASSES | FSDP_CLASSES | INIT_PROCESS_GROUP
SPAWNERS = {"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes",
            "torch.multiprocessing.spawn.spawn", "torch.multiprocessing.spawn.start_processes"}
IN_MEMORY = {"io.BytesIO", "io.StringIO", "tempfile.SpooledTemporaryFile"}
_BUFFER_NAME = re.compile(r"(^|_)(buf|buffer|bytes|stream|bio|byte_stream|memfile)($|_)|buffer$", re.I)


class SaveOnEveryRank(Rule):
    """`torch.save` in a DDP script runs on every rank, all writing the same file.

    ## What it does
    In a file that starts a process group (`init_process_group`) or wraps a model in DDP / FSDP,
    flags `torch.save(obj, path)` that is not under a rank guard. Recognised guards: `if rank == 0`,
    `if dist.get_rank() == 0`, `if is_main_process()`, `if args.local_rank in (-1, 0)`,
    `if trainer.is_global_zero`, `if self.gpu_id == 0`, an earlier `if rank != 0: return`, a `@rank_zero_only`
    decorator, and a function only called under such a guard (`def save_on_master(...)`). A path that mentions
    the rank (`f"shard_{rank}.pt"`: one file per rank), saves to an in-memory buffer, and functions
    never called in the file (library code: the caller decides) are not flagged.

    ## Why is this bad?
    A DDP script runs once per rank, and every rank holds the same replica: without a guard all
    ranks serialise the same object to the same path at about the same time. On torch 2.13 with 2
    gloo ranks both processes reach `torch.save` on the one path and write the whole file; the copy
    on disk is whichever finished last and the other writes are wasted I/O: N ranks means N times
    the checkpoint traffic, as N concurrent writers of one file on a shared filesystem.

    ## Fix safety
    No autofix: which rank saves, and whether the other ranks must wait (`dist.barrier()`) before
    reading the file, is the author's choice. Typically `if dist.get_rank() == 0: torch.save(...)`.
    """

    code = "TP603"
    category = Category.DISTRIBUTED
    severity = Severity.WARNING
    requires = (
        "the file starts a process group or wraps a model in DDP / FSDP",
        "the `torch.save` is under no rank guard the analysis recognises",
    )
    facts = ("save-writes-only-on-rank-0",)
    message = "`torch.save` runs on every rank of this DDP script: all ranks write the same file at once"
    fix_hint = ("save from one rank only (`if dist.get_rank() == 0: torch.save(...)`), "
                "then `dist.barrier()` if others read it")
    nodes = (ast.Call,)
    calls = last_names(SAVES)
    triggers = ("init_process_group", "DistributedDataParallel", "FullyShardedDataParallel", "fully_shard")

    valid = [
        """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
def main(rank, world_size):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    ddp = DDP(Net().to(rank), device_ids=[rank])
    train(ddp)
    if dist.get_rank() == 0:
        torch.save(ddp.module.state_dict(), "model.pt")
    dist.barrier()
""",
        """
import torch
import torch.distributed as dist
def is_main_process():
    return dist.get_rank() == 0
def save_on_master(*args, **kwargs):
    if is_main_process():
        torch.save(*args, **kwargs)
def main(args):
    dist.init_process_group("nccl")
    save_on_master(model.state_dict(), "ckpt.pt")
""",
        """
import torch
import torch.distributed as dist
def checkpoint(model, epoch):
    torch.save(model.state_dict(), f"ckpt_{epoch}.pt")
def main(args):
    dist.init_process_group("gloo")
    for epoch in range(3):
        if args.local_rank in (-1, 0):
            checkpoint(model, epoch)
""",
        """
import io
import torch
import torch.distributed as dist
def main(rank):
    dist.init_process_group("gloo")
    torch.save(optimizer.state_dict(), f"optim_rank{rank}.pt")
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
""",
        """
import torch
def train(model):
    torch.save(model.state_dict(), "model.pt")
""",
        """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
class Trainer:
    def __init__(self, model, gpu_id):
        self.gpu_id = gpu_id
        self.model = DDP(model, device_ids=[gpu_id])
    def _save_checkpoint(self, epoch):
        torch.save(self.model.module.state_dict(), "checkpoint.pt")
    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)
            if self.gpu_id == 0 and epoch % 10 == 0:
                self._save_checkpoint(epoch)
""",
        """
import torch
import torch.distributed as dist
def main(args):
    dist.init_process_group("nccl")
    args.save_logs = args.logs is not None and is_master(args)
    for epoch in range(args.epochs):
        train_one_epoch(model, epoch)
        if args.save_logs:
            torch.save(model.state_dict(), f"epoch_{epoch}.pt")
""",
    ]
    invalid = [
        """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
def main(rank, world_size):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    ddp = DDP(Net().to(rank), device_ids=[rank])
    train(ddp)
    torch.save(ddp.module.state_dict(), "model.pt")
""",
        """
import torch
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel
def save_checkpoint(model, path):
    torch.save({"model": model.state_dict()}, path)
def worker(rank):
    model = DistributedDataParallel(Net())
    for epoch in range(10):
        train_epoch(model)
        save_checkpoint(model, "last.pt")
if __name__ == "__main__":
    mp.spawn(worker, nprocs=4)
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if ctx.call_name(node) not in SAVES or not is_multiprocess_script(ctx):
            return
        target = argument(node, "f", 1)
        if target is None or _per_rank_or_in_memory(ctx, target):
            return
        if _runs_on_every_rank(ctx, node, depth=3):
            yield self.hit(node, subject=ctx.segment(target) or None)


def _per_rank_or_in_memory(ctx: FileContext, target: ast.AST) -> bool:
    if isinstance(target, ast.Starred):
        return True  # torch.save(*args): the path is the caller's
    for value in [target, *ctx.values(target)]:
        if mentions_rank(value):
            return True  # one file per rank
        if isinstance(value, ast.Call) and ctx.call_name(value) in IN_MEMORY:
            return True
        if isinstance(value, ast.Name) and _BUFFER_NAME.search(value.id):
            return True
    return False


def _runs_on_every_rank(ctx: FileContext, node: ast.AST, depth: int) -> bool:
    """``node`` is reached on every rank: not under a rank guard, here or at any caller in the file."""
    if in_rank_guard(ctx, node):
        return False
    fn = ctx.enclosing_function(node)
    if fn is None:
        # module level runs on every rank, except the `__main__` block of a script that spawns its
        # ranks (`mp.spawn`): spawned children import the file under another name
        return not (_spawns_ranks(ctx) and _under_main_block(ctx, node))
    if depth == 0:
        return False
    if isinstance(ctx.parent(fn), ast.ClassDef):  # a method: `obj.name(...)`
        uses: list[ast.AST] = [n for n in ctx.nodes(ast.Attribute) if n.attr == fn.name and isinstance(n.ctx, ast.Load)]
    else:
        uses = [n for n in ctx.nodes(ast.Name) if n.id == fn.name and isinstance(n.ctx, ast.Load)]
    uses = [use for use in uses if not _inside(use, fn, ctx)]
    if not uses:
        # never called in this file: a per-rank entry point if it sets up DDP itself, else library
        # code whose caller decides
        return any(isinstance(sub, ast.Call) and ctx.call_name(sub) in PER_RANK_SETUP for sub in ctx.walk_scope(fn))
    return any(_spawned(ctx, use) or _runs_on_every_rank(ctx, use, depth - 1) for use in uses)


def _spawned(ctx: FileContext, use: ast.AST) -> bool:
    """``use`` is the function handed to ``mp.spawn``: it runs once in every rank."""
    parent = ctx.parent(use)
    if isinstance(parent, ast.keyword):
        parent = ctx.parent(parent)
    return isinstance(parent, ast.Call) and use is not parent.func and ctx.call_name(parent) in SPAWNERS


def _spawns_ranks(ctx: FileContext) -> bool:
    return any(ctx.call_name(n) in SPAWNERS for n in ctx.nodes(ast.Call))


def _under_main_block(ctx: FileContext, node: ast.AST) -> bool:
    for anc in ctx.ancestors(node):
        if isinstance(anc, ast.If) and "__main__" in ctx.segment(anc.test):
            return True
    return False


def _inside(node: ast.AST, fn: ast.AST, ctx: FileContext) -> bool:
    return any(anc is fn for anc in ctx.ancestors(node))
