from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, argument, is_const
from torchpact.lint.dataflow import _Unpacked
from torchpact.lint.rule import Hit, Rule
from torchpact.lint.rules._tensors import resolved_tensor


class DataloaderWithoutWorkers(Rule):
    """A `DataLoader` loads batches in the training process (`num_workers` missing or 0).

    ## What it does
    Flags `torch.utils.data.DataLoader(...)` without `num_workers`, or with `num_workers=0`
    (TorchFix TOR401, which TorchFix leaves off by default). Info only: for small in-memory data
    loading in the main process is the right choice.

    The condition it needs: fetching a batch does work that workers could overlap with training
    (reading, decoding, augmenting). A dataset whose items are already tensors in memory has none: a
    `TensorDataset`, a tensor itself, a list of tensors (`[(x[i], y[i]) for i in range(n)]`), a
    `Dataset` class of this file whose `__getitem__` only returns tensors it holds
    (`return self.data[index]`), or a `Subset` / `random_split` part / `ConcatDataset` of those. There each batch is a
    few index operations, which workers would only add inter-process copies to (the proof times nothing; it shows the
    items are views of the tensors already held), so such a DataLoader is not flagged.

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

    valid = [
        """
from torch.utils.data import DataLoader
train = DataLoader(ds, batch_size=64, shuffle=True, num_workers=8)
val = DataLoader(ds, batch_size=64, num_workers=args.workers)
def make(**kw):
    return DataLoader(ds, **kw)
""",
        """
import torch
from torch.utils.data import DataLoader, TensorDataset
features, targets = torch.randn(512, 16), torch.randint(0, 4, (512,))
loader = DataLoader(TensorDataset(features, targets), batch_size=32, shuffle=True)
""",
        """
import torch
from torch.utils import data
def loaders(x: torch.Tensor, y: torch.Tensor):
    full = data.TensorDataset(x, y)
    train_part, val_part = data.random_split(full, [0.8, 0.2])
    return (data.DataLoader(train_part, batch_size=16, num_workers=0),
            data.DataLoader(dataset=val_part, batch_size=16))
""",
        """
import torch
from torch.utils.data import ConcatDataset, DataLoader, Subset, TensorDataset
a = TensorDataset(torch.zeros(10, 3))
b = TensorDataset(torch.ones(10, 3))
both = ConcatDataset([a, b])
first = Subset(both, range(5))
it = DataLoader(first, 4)
""",
        """
import torch
from torch.utils.data import DataLoader
points = torch.rand(1000, 2)
batches = DataLoader(points, batch_size=100, shuffle=False, sampler=None, batch_sampler=None, num_workers=0)
""",
        """
import torch
import torch.utils.data as tud
if small:
    ds = tud.TensorDataset(torch.arange(10.0))
else:
    ds = tud.TensorDataset(torch.linspace(0, 1, 100))
loader = tud.DataLoader(ds, batch_size=8)
""",
        """
import torch
from torch.utils.data import DataLoader, Dataset
class Cached(Dataset):
    def __init__(self, n):
        self.inputs = torch.randn(n, 8)
        self.labels = torch.randint(0, 2, (n,))

    def __getitem__(self, i):
        return self.inputs[i], self.labels[i]

    def __len__(self):
        return len(self.labels)

def loader(xs: torch.Tensor, ys: torch.Tensor):
    pairs = [(xs[i], ys[i]) for i in range(len(xs))]
    return DataLoader(Cached(64), batch_size=8), DataLoader(pairs, batch_size=8)
""",
    ]
    invalid = [
        """
from torch.utils.data import DataLoader
train = DataLoader(ds, batch_size=64, shuffle=True)
""",
        """
import torch
from torch.utils.data import DataLoader, TensorDataset
from torchvision.datasets import ImageFolder
loader = DataLoader(ImageFolder("images/"), batch_size=32, shuffle=True)
""",
        """
import torch
from torch.utils import data
def loaders(files):
    full = FileDataset(files)
    train_part, val_part = data.random_split(full, [0.8, 0.2])
    return data.DataLoader(train_part, batch_size=16, num_workers=0)
""",
        """
import torch
from torch.utils.data import ConcatDataset, DataLoader, TensorDataset
a = TensorDataset(torch.zeros(10, 3))
both = ConcatDataset([a, AudioClips("clips/")])
it = DataLoader(both, 4)
""",
        """
import torch
import torch.utils.data as tud
if small:
    ds = tud.TensorDataset(torch.arange(10.0))
else:
    ds = ShardedTextDataset(path)
loader = tud.DataLoader(ds, batch_size=8)
""",
        """
import torch
from torch.utils.data import DataLoader, Dataset
class FromDisk(Dataset):
    def __init__(self, paths):
        self.paths = paths

    def __getitem__(self, i):
        return torch.load(self.paths[i])

    def __len__(self):
        return len(self.paths)

def loader(paths):
    return DataLoader(FromDisk(paths), batch_size=8)
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if ctx.call_name(node) != "torch.utils.data.DataLoader":
            return
        if any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
            return
        workers = argument(node, "num_workers", 5)
        if (workers is None or is_const(workers, 0)) and not _in_memory(argument(node, "dataset", 0), ctx):
            yield self.hit(node)


_TENSOR_DATASETS = {"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"}
_WRAPPERS = {  # datasets made of other datasets: in memory when those are
    "torch.utils.data.Subset", "torch.utils.data.dataset.Subset", "torch.utils.data.random_split",
    "torch.utils.data.dataset.random_split", "torch.utils.data.ConcatDataset",
    "torch.utils.data.dataset.ConcatDataset", "torch.utils.data.StackDataset",
    "torch.utils.data.dataset.StackDataset",
}


def _in_memory(dataset: ast.AST | None, ctx: FileContext, depth: int = 10) -> bool:
    """Whether every value ``dataset`` may be is a dataset of tensors already in memory (see above)."""
    if dataset is None or depth < 0:
        return False
    if isinstance(dataset, _Unpacked):  # ``train, val = random_split(...)``
        return _in_memory(dataset.value, ctx, depth - 1)
    if isinstance(dataset, (ast.Name, ast.Attribute)):
        values = [v for _, v in ctx.bindings(dataset)]
        return bool(values) and all(_in_memory(v, ctx, depth - 1) for v in values)
    if isinstance(dataset, (ast.List, ast.Tuple)):  # ConcatDataset([a, b]), or a list of items
        return all(_in_memory(e, ctx, depth - 1) or _item(e, ctx) for e in dataset.elts)
    if isinstance(dataset, ast.ListComp):  # [(x[i], y[i]) for i in range(n)]
        return _item(dataset.elt, ctx)
    if isinstance(dataset, ast.Subscript):  # random_split(...)[0]
        return _in_memory(dataset.value, ctx, depth - 1)
    if isinstance(dataset, ast.Call):
        qn = ctx.call_name(dataset)
        if qn in _TENSOR_DATASETS:
            return True
        if qn in _WRAPPERS:
            parts = [*dataset.args, *(k.value for k in dataset.keywords if k.arg in ("dataset", "datasets"))]
            return bool(parts) and _in_memory(parts[0], ctx, depth - 1)
        if isinstance(dataset.func, ast.Name) and dataset.func.id in ctx.classes:
            return _items_in_memory(ctx.classes[dataset.func.id], ctx)
    return resolved_tensor(dataset, ctx)


def _items_in_memory(cls: ast.ClassDef, ctx: FileContext) -> bool:
    """A map-style Dataset class of this file whose ``__getitem__`` only returns tensors it holds
    (``return self.data[index]``, ``return self.x[i], self.y[i]``)."""
    getitem = ctx.method(cls, "__getitem__")
    if getitem is None:
        return False
    returns = [n for n in ctx.walk_scope(getitem.body) if isinstance(n, ast.Return)]
    return bool(returns) and all(r.value is not None and _item(r.value, ctx) for r in returns)


def _item(expr: ast.AST, ctx: FileContext) -> bool:
    """A tensor already in memory, or a tuple / list / dict of them."""
    if isinstance(expr, (ast.Tuple, ast.List)):
        return bool(expr.elts) and all(_item(e, ctx) for e in expr.elts)
    if isinstance(expr, ast.Dict):
        return bool(expr.values) and all(_item(v, ctx) for v in expr.values)
    return resolved_tensor(expr, ctx)
