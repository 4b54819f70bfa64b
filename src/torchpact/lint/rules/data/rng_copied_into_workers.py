from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Rule

GENERATORS = {
    "numpy.random.default_rng", "numpy.random.RandomState", "numpy.random.Generator",
    "random.Random", "torch.Generator",
}
DATASET_BASES = {"torch.utils.data.Dataset", "torch.utils.data.IterableDataset", "torch.utils.data.dataset.Dataset"}
READERS = ("__getitem__", "__iter__", "__getitems__")


class RngCopiedIntoWorkers(Rule):
    """A Dataset keeps its own random generator, which every DataLoader worker copies in the same state.

    ## What it does
    Flags `self.x = np.random.default_rng(...)` / `np.random.RandomState(...)` /
    `random.Random(...)` / `torch.Generator()` assigned in a Dataset's `__init__` and used in its
    `__getitem__` / `__iter__`, unless the file re-seeds in a `worker_init_fn` or through
    `get_worker_info()`.

    ## Why is this bad?
    Each DataLoader worker gets a copy of the dataset object, generator included, in the state it
    had in the main process. On torch 2.13, with `num_workers=2`, worker 0 and worker 1 draw the
    *same* random numbers, and because the main process's generator never advances, every epoch
    repeats the first one: the "random" augmentations are duplicated across workers and identical
    across epochs. (The global `np.random` and `random` generators do *not* have this problem:
    torch seeds them per worker since 1.9 — the proof shows both.)

    ## Fix safety
    No autofix. Create the generator lazily in the worker, or re-seed it in a `worker_init_fn`
    from `torch.utils.data.get_worker_info().seed`, or draw from `torch`'s / NumPy's global
    generator, which torch seeds per worker and per epoch.
    """

    code = "TP550"  # shared with the run check of the same pattern (watch/watchers)
    category = Category.DATA
    severity = Severity.WARNING
    requires = (
        "the generator is built in a Dataset's `__init__` and used in `__getitem__` / `__iter__`",
        "the file never re-seeds it per worker",
    )
    message = ("this generator is copied into every DataLoader worker in the same state: workers draw the same "
               "numbers, and every epoch repeats the first")
    fix_hint = ("re-seed it per worker (`worker_init_fn` using `torch.utils.data.get_worker_info().seed`) or use "
                "the global generators, which torch seeds per worker")
    nodes = (ast.ClassDef,)
    triggers = ("Random", "default_rng", "Generator")

    valid = ["""
import numpy as np
from torch.utils.data import Dataset
class Noisy(Dataset):
    def __getitem__(self, i):
        return self.data[i] + np.random.randn()
""", """
import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info
class Noisy(Dataset):
    def __init__(self):
        self.rng = np.random.default_rng(0)
    def __getitem__(self, i):
        return self.rng.random()
def seed_worker(worker_id):
    info = get_worker_info()
    info.dataset.rng = np.random.default_rng(info.seed)
"""]
    invalid = ["""
import numpy as np
from torch.utils.data import Dataset
class Augmented(Dataset):
    def __init__(self, images, seed=0):
        self.images = images
        self.rng = np.random.default_rng(seed)
    def __getitem__(self, i):
        flip = self.rng.random() < 0.5
        return self.images[i].flip(-1) if flip else self.images[i]
"""]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.ClassDef)
        if not any(ctx.resolve(b) in DATASET_BASES for b in node.bases):
            return
        text = ctx.source.text
        if "worker_init_fn" in text or "get_worker_info" in text:
            return
        init = ctx.method(node, "__init__")
        if init is None:
            return
        generators: dict[str, ast.AST] = {}
        for stmt in ctx.walk_scope(init.body):
            if (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
                    and ctx.call_name(stmt.value) in GENERATORS):
                for t in stmt.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        generators[t.attr] = stmt
        if not generators:
            return
        for name in READERS:
            reader = ctx.method(node, name)
            if reader is None:
                continue
            for n in ctx.walk_scope(reader.body):
                if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
                        and n.attr in generators):
                    yield self.hit(generators.pop(n.attr), subject=f"self.{n.attr}")
