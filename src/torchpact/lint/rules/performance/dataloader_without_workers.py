from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, argument, is_const
from torchpact.lint.rule import Hit, Rule


class DataloaderWithoutWorkers(Rule):
    """A `DataLoader` loads batches in the training process (`num_workers` missing or 0).

    ## What it does
    Flags `torch.utils.data.DataLoader(...)` without `num_workers`, or with `num_workers=0`
    (TorchFix TOR401, which TorchFix leaves off by default). Info only: for small in-memory data
    loading in the main process is the right choice.

    ## Why is this bad?
    With `num_workers=0` on torch 2.13 every batch is loaded, decoded and augmented synchronously
    in the training process between steps: the accelerator idles while Python reads files.
    Workers prepare the next batches in parallel (the proof shows the main process doing all the
    `__getitem__` calls).

    ## Fix safety
    No autofix: the right number depends on the machine, and workers need a picklable dataset
    (and a `if __name__ == "__main__":` guard where processes are spawned).
    """

    code = "TP920"
    category = Category.PERFORMANCE
    severity = Severity.INFO
    requires = (
        "the loader resolves to `torch.utils.data.DataLoader` and gets no `num_workers` above 0",
    )
    message = "the DataLoader loads every batch in the training process (`num_workers=0`), between steps"
    fix_hint = "set `num_workers` (e.g. 4-8, with `pin_memory=True` and `persistent_workers=True` on GPU)"
    nodes = (ast.Call,)
    calls = frozenset({"DataLoader"})
    triggers = ("DataLoader",)

    valid = ["""
from torch.utils.data import DataLoader
train = DataLoader(ds, batch_size=64, shuffle=True, num_workers=8)
val = DataLoader(ds, batch_size=64, num_workers=args.workers)
def make(**kw):
    return DataLoader(ds, **kw)
"""]
    invalid = ["""
from torch.utils.data import DataLoader
train = DataLoader(ds, batch_size=64, shuffle=True)
"""]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if ctx.call_name(node) != "torch.utils.data.DataLoader":
            return
        if any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
            return
        workers = argument(node, "num_workers", 5)
        if workers is None or is_const(workers, 0):
            yield self.hit(node)
