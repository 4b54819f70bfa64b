from __future__ import annotations

import ast
import re
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, argument, mentions_rank
from torchpact.lint.rule import Hit, Rule, last_names
from torchpact.lint.rules.distributed._util import (DDP_CLASSES, FSDP_CLASSES, INIT_PROCESS_GROUP, in_process_id_guard,
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
    flags `torch.save(obj, path)` that some path reaches without passing a rank-0 test. The condition:
    a `torch.save` writes once per job when every path to it passes a test that is true only on rank 0
    (or outside a distributed job) - an enclosing `if` whose branch only rank 0 takes, an early
    `return` / `raise` / `exit` that every other rank takes earlier in the same function
    (`if not self.is_world_master(): return`, `if local_rank > 0: return`), or such a test around every
    call of the function or method that saves, in this file (followed up to three calls out). Rank-0
    tests are read in torch's terms: the rank (`dist.get_rank()`, `rank`, `local_rank`, `kwargs["rank"]`,
    `self.gpu_id`) compared with 0 (`== 0`, `in (-1, 0)`, `<= 0`, `not rank`; `== -1` and
    `"rank" not in kwargs` mean no distributed job), a rank-0 predicate (`is_main_process`,
    `accelerator.is_main_process`, `trainer.is_global_zero`, `is_world_process_zero()`, `is_master`), a flag
    bound from one (`is_writer = dist.get_rank() == 0`), an `and` with one such test, an `or` of such
    tests and no-job tests only (`not args.distributed or dist.get_rank() == 0`), and a `@rank_zero_only`
    decorator. A test that is true on other ranks too is no guard:
    `rank != 0`, `if rank:`, the `else` of `if rank == 0`, `rank == 0 or epoch % 5 == 0`. A test that
    names the rank in a form not read is taken as a guard (a false alarm costs more than a miss). A
    path that mentions the rank (`f"shard_{rank}.pt"`: one file per rank), saves to an in-memory
    buffer, and functions never called in the file (library code: the caller decides) are not flagged.

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
        "some path to the `torch.save` passes no rank-0 test: no enclosing branch, early exit of the other "
        "ranks, or guard around every call of the saving function that only rank 0 passes",
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
        """
import torch
import torch.distributed as dist
def export(net, args):
    if args.local_rank > 0:
        return
    torch.save(net.state_dict(), args.out)
def run(args):
    dist.init_process_group("gloo")
    export(net, args)
""",
        """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
class Runner:
    def write(self, where):
        torch.save({"weights": self.net.module.state_dict()}, where)
    def fit(self, net, loader, **kw):
        self.net = DistributedDataParallel(net)
        for step, batch in enumerate(loader):
            self.net(batch).sum().backward()
            if "rank" not in kw or kw["rank"] == 0:
                self.write("last.ckpt")
        if dist.get_rank() == 0:
            self.write("final.ckpt")
""",
        """
import torch
from accelerate import Accelerator
from torch.nn.parallel import DistributedDataParallel
def dump(state, target):
    torch.save(state, target)
def loop(accelerator, encoder):
    wrapped = DistributedDataParallel(encoder)
    for epoch in range(4):
        if accelerator.is_main_process:
            dump(wrapped.module.state_dict(), "enc.bin")
    if epoch == 3 and accelerator.is_main_process:
        dump(wrapped.module.state_dict(), "enc-final.bin")
""",
        """
import torch
import torch.distributed as dist
def main(world):
    dist.init_process_group("gloo", world_size=world)
    writer = not dist.is_initialized() or dist.get_rank() == 0
    for it in range(100):
        step(it)
        if writer and it % 10 == 0:
            torch.save(weights, "w.pt")
""",
        """
import torch
import torch.distributed as dist
class Loop:
    def persist(self, dest):
        if not self.is_world_master():
            raise RuntimeError("only the first process writes")
        torch.save(self.state, dest)
    def start(self):
        dist.init_process_group("gloo")
        self.persist("s.pt")
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
        """
import torch
import torch.distributed as dist
def main(world):
    dist.init_process_group("gloo", world_size=world)
    for epoch in range(20):
        train(epoch)
        if dist.get_rank() == 0 or epoch % 5 == 0:
            torch.save(weights, "w.pt")
""",
        """
import torch
import torch.distributed as dist
def export(net, args):
    torch.save(net.state_dict(), args.out)
def run(args):
    dist.init_process_group("gloo")
    if args.local_rank in (-1, 0):
        export(net, args)
    export(net, args)
""",
        """
import torch
import torch.distributed as dist
def main(rank):
    dist.init_process_group("gloo")
    helper = rank != 0
    if helper:
        torch.save(weights, "w.pt")
""",
        """
import torch
import torch.distributed as dist
def write(net, where, local_rank):
    if local_rank == 0:
        return
    torch.save(net.state_dict(), where)
def main(local_rank):
    dist.init_process_group("gloo")
    write(net, "last.ckpt", local_rank)
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
    if ctx.rank_guards.rank_zero_only(node) or in_process_id_guard(ctx, node):
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
