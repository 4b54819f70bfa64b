from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext, argument, is_const
from torchpact.lint.dataflow import _Unpacked
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.datasets import array_aliases, concrete_subclasses, feeds_callers_state, serves_held_items
from torchpact.lint.project import IN_MEMORY_ITEMS
from torchpact.lint.rules._tensors import resolved_tensor
from torchpact.lint.rules.performance._loader_use import callee, consumed_with_work
from torchpact.lint.analysis.following import follows_definitions


class DataloaderWithoutWorkers(Rule):
    """A `DataLoader` loads batches in the training process (`num_workers` missing or 0).

    ## What it does
    Flags `torch.utils.data.DataLoader(...)` without `num_workers`, or with `num_workers=0`
    (TorchFix TOR401, which TorchFix leaves off by default). Info only: for small in-memory data
    loading in the main process is the right choice.

    The condition it needs, in torch's terms: fetching a batch does work that workers could overlap
    with the consumer's training steps. Both halves must be possible.

    Loading does work unless every item is already in memory: a `TensorDataset`, a tensor itself, a
    list of tensors (`[(x[i], y[i]) for i in range(n)]`), a Python `range` or a list of numbers, a
    `Subset` / `random_split` part / `ConcatDataset` of those, or a dataset class whose
    `__getitem__` only indexes arrays or tensors it holds (`return self.x[i], self.y[i]`, the data
    built by torch or numpy, not loaded or memory-mapped from a file) or whose `__iter__` yields
    from such data or yields tensors torch makes (`yield torch.rand(1)`). The class may be of this
    file or of another linted module of the project (its project facts); a class lint cannot see
    leaves the finding `unresolved`. Held data that `__init__` computes by any call counts as in
    memory whatever computed it (`self.x = simulator(self.theta)`, `self.theta =
    prior.sample((n,))`: computed once, at construction), unless the call is lazy by type — its name
    says it opens, maps or streams (`open`, `h5py.File`, `memmap`, `zarr`, `lmdb`, a `*Dataset` /
    `*Loader` / `*Reader`, a client or cursor) or it passes `mmap_mode=` / `mmap=` — since such a
    value reads when indexed. A dataset variable set in several branches counts as in
    memory when every branch is; a parameter annotated with a dataset class of this file
    (`dataset: PredictionDataset`) counts as that class's family here, the class and its subclasses
    with a `__getitem__` / `__iter__` of their own (an abstract one that only raises is left out),
    and is in memory when each of them is. There each batch is a few index operations and
    `default_collate`, which workers would only add inter-process copies to (the proof times
    nothing; it shows the items are views of the tensors already held).

    Workers cannot serve either a dataset whose `__iter__` / `__getitem__` writes into an object its
    constructor was handed (`self.metrics[key].append(v)`, `self.sink[i] = v`, `self.queue.put(x)`),
    or that iterates such a dataset held from an annotated constructor parameter (a batcher over a
    queue-fed stream): a worker process iterates a copy of the dataset, whose writes never reach the
    caller's object, so `num_workers=0` is required there. A dataset writing only into state it made
    itself (its own cache dict) is judged by its items as above.

    What `num_workers=0` costs is training throughput: the accelerator idles between optimizer steps
    while the training process loads the next batch. So the loader must be consumed by training
    steps: some loop of this file that iterates it back-propagates or steps an optimizer per batch
    (directly or through a function of this file it calls), or calls code lint cannot see into that
    may (then `unresolved`). A prediction, embedding or feature-extraction pass takes no training
    step — forwards of a module (`model(x)`, `self.network(x)`, `model.predict(x)` / `.generate` /
    `.encode`), losses computed for a metric, tensor methods, bookkeeping (`append`, `print`,
    asserts, `is_*` / `check_*` predicates), anything under `no_grad` / `inference_mode` — and nor
    does a loader that is only fetched from once (`next(iter(loader))`) or never iterated. A loader
    that leaves the code lint sees (returned, stored on an object, handed to a trainer) may be
    iterated by a training loop elsewhere and is flagged, `unresolved`.

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
        "the dataset's items are not resolved as data already in memory",
        "a loop that iterates the loader back-propagates or steps an optimizer per batch (or calls code lint "
        "cannot see into), or the loader leaves the file's view",
    )
    message = "the DataLoader loads every batch in the training process (`num_workers=0`), between its training steps"
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
        """
import torch
from torch.utils.data import DataLoader
def train(model, opt, n):
    for idx in DataLoader(range(n), batch_size=16, shuffle=True):
        model(idx.float()).sum().backward()
        opt.step()
    ids = DataLoader(dataset=list(range(64)), batch_size=4)
    squares = DataLoader([k * k + 1 for k in range(32)], 8)
    for batch in ids:
        model(batch.float()).sum().backward()
    return [model(b.float()) for b in squares]
""",
        """
import numpy as np
from torch.utils.data import DataLoader
class Regression:
    def __init__(self, slope=2.0, length=64, seed=0):
        gen = np.random.default_rng(seed)
        self.inputs = gen.normal(size=(length,)).astype(np.float32)
        self.targets = slope * self.inputs + gen.normal(scale=0.1, size=(length,)).astype(np.float32)

    def __len__(self):
        return len(self.inputs)

    def __getitem__(self, i):
        return {"inputs": self.inputs[i], "targets": self.targets[i]}

loader = DataLoader(Regression(length=96), batch_size=16)
for batch in loader:
    loss = ((net(batch["inputs"]) - batch["targets"]) ** 2).mean()
    loss.backward()
""",
        """
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset
class Stream(IterableDataset):
    def __init__(self, n):
        self.values = torch.arange(n, dtype=torch.float32)

    def __iter__(self):
        for v in self.values:
            yield v

class Noise(IterableDataset):
    def __iter__(self):
        for _ in range(10):
            yield torch.rand(1)

class Rows(IterableDataset):
    def __init__(self):
        self.table = torch.randn(40, 3)

    def __iter__(self):
        yield from self.table

def run(model, streaming, n):
    if streaming:
        data = Stream(n)
    else:
        data = TensorDataset(torch.arange(n))
    for loader in (DataLoader(data, batch_size=4), DataLoader(Noise()), DataLoader(Rows(), batch_size=8)):
        for batch in loader:
            model(batch).sum().backward()
""",
        """
import unittest
import torch
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder
def test_batches_keep_their_size(tmp_path):
    loader = DataLoader(ImageFolder(tmp_path), batch_size=4)
    seen = []
    for batch in loader:
        seen.append(batch)
        assert len(batch) == 2
    first = next(iter(DataLoader(ImageFolder(tmp_path), batch_size=2)))
    unused = DataLoader(ImageFolder(tmp_path))
    assert len(seen) == len(loader)

class Batching(unittest.TestCase):
    def test_shapes(self):
        for images, labels in DataLoader(ImageFolder("fixtures/"), batch_size=3):
            self.assertEqual(images.shape[0], 3)
            torch.testing.assert_close(labels, labels)
""",
        """
import torch
from torch.utils.data import DataLoader, Dataset
class Simulated(Dataset):
    def __init__(self, count, prior, simulate):
        params = prior.sample((count,))
        self.params = params
        self.obs = simulate(params)[:, 0]

    def __getitem__(self, k):
        return self.params[k, ...], self.obs[k]

    def __len__(self):
        return len(self.params)

def fit(net, opt, prior, simulate):
    for p, o in DataLoader(dataset=Simulated(256, prior, simulate), batch_size=32):
        net(p, o).mean().backward()
        opt.step()
""",
        """
import abc
import torch
from torch.utils.data import DataLoader, Dataset
class Pairs(Dataset):
    @abc.abstractmethod
    def __getitem__(self, index):
        raise NotImplementedError

class Grid(Pairs):
    def __init__(self, rows, cols):
        self.cols = cols

    def __getitem__(self, index):
        row, col = divmod(index, self.cols)
        return torch.as_tensor([row, col])

class Picked(Grid):
    def __init__(self, left, right):
        self.left, self.right = torch.as_tensor(left), torch.as_tensor(right)

    def __getitem__(self, index):
        return torch.tensor([self.left[index], self.right[index]])

def score(model, pairs: Pairs, out):
    for batch in DataLoader(pairs, batch_size=512):
        out.append(model(batch))

def score_later(model, pairs: "Grid"):
    return [model(b) for b in DataLoader(pairs, 64)]
""",
        """
import queue
import torch
from torch.utils.data import DataLoader, IterableDataset
class FromQueue(IterableDataset):
    def __init__(self, source, stats):
        self.source = source
        self.stats = stats

    def __iter__(self):
        while True:
            item = self.source.get()
            self.stats["waited"].append(1.0)
            yield item

class Grouped(IterableDataset):
    def __init__(self, inner: FromQueue, size):
        self.inner = inner
        self.size = size

    def __iter__(self):
        group = []
        for sample in self.inner:
            group.append(sample)
            if len(group) == self.size:
                yield group
                group = []

def train(model, q, stats, grouped):
    data = FromQueue(q, stats)
    if grouped:
        data = Grouped(data, 4)
    for batch in DataLoader(data, batch_size=1):
        model(batch).sum().backward()
""",
        """
import torch
from torch.utils.data import DataLoader, Dataset
class Counting(Dataset):
    def __init__(self, table, seen):
        self.table = torch.as_tensor(table)
        self.seen = seen

    def __getitem__(self, i):
        self.seen[i] = self.seen.get(i, 0) + 1
        return self.table[i]

def loop(model, table, counts):
    for b in DataLoader(Counting(table, counts), batch_size=2):
        model(b).sum().backward()
""",        """
import torch
import torch.utils.data as tud
if small:
    ds = tud.TensorDataset(torch.arange(10.0))
else:
    ds = ShardedTextDataset(path)
loader = tud.DataLoader(ds, batch_size=8)
with torch.no_grad():
    embeddings = [encoder(b) for b in loader]
""",
        """
import numpy as np
import torch
from torch.utils.data import DataLoader
class Classifier:
    def predict_proba(self, paths):
        self.network.eval()
        scores = []
        for x in DataLoader(ImageFiles(paths), batch_size=256, shuffle=False):
            scores.append(torch.softmax(self.network(x), dim=1).detach().numpy())
        return np.vstack(scores)
""",
        """
import torch
from torch.utils.data import DataLoader
def fit_prior(ae_model, samples):
    loader = DataLoader(dataset=SampleFiles(samples), batch_size=100, shuffle=True)
    codes = []
    try:
        with torch.no_grad():
            for _, batch in enumerate(loader):
                codes.append(ae_model(batch).mean(0))
    except RuntimeError:
        for _, batch in enumerate(loader):
            codes.append(ae_model(batch).mean(0).detach())
    return torch.cat(codes)
""",
        """
import torch
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder
def _embed(net, batch):
    return net(batch).flatten(1)

def gallery(net, folder):
    feats = []
    for images in DataLoader(ImageFolder(folder), batch_size=32):
        feats.append(_embed(net, images))
    return torch.cat(feats)

def validate(net, criterion, root):
    total = 0.0
    for x, y in DataLoader(ImageFolder(root), batch_size=64):
        total += criterion(net(x), y).item()
    return total
""",
        """
from torch.utils.data import DataLoader
from tqdm import tqdm
def transcribe(model, files):
    loader = DataLoader(AudioClips(files), batch_size=16)
    preds = []
    for i, (clip, _) in enumerate(tqdm(loader)):
        preds.extend(model.generate(clip).tolist())
    return preds
""",        """
import tabnet_lib
from torch.utils.data import DataLoader
class Tabular:
    def __init__(self):
        self.tabnet = tabnet_lib.TabNet(8, 2)

    def explain(self, rows):
        self.tabnet.eval()
        masks = []
        for batch in DataLoader(RowFiles(rows), batch_size=512):
            masks.append(self.tabnet.forward_masks(batch))
            self.tabnet(batch)
        return masks
""",
    ]
    invalid = [
        """
from torch.utils.data import DataLoader
train = DataLoader(ds, batch_size=64, shuffle=True)
for x, y in train:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""",
        """
import torch
from torch.utils.data import DataLoader, TensorDataset
from torchvision.datasets import ImageFolder
loader = DataLoader(ImageFolder("images/"), batch_size=32, shuffle=True)
trainer.fit(net, loader)
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
for step, batch in enumerate(it):
    run_step(batch)
""",
        Invalid("""
import torch
import torch.utils.data as tud
from .steps import train_step
if small:
    ds = tud.TensorDataset(torch.arange(10.0))
else:
    ds = ShardedTextDataset(path)
loader = tud.DataLoader(ds, batch_size=8)
losses = [train_step(b) for b in loader]
""", evidence="unresolved"),
        """
import numpy as np
import torch
from torch.utils.data import DataLoader
class Classifier:
    def fit(self, paths):
        self.network.train()
        for x, y in DataLoader(ImageFiles(paths), batch_size=256, shuffle=True):
            loss = torch.nn.functional.cross_entropy(self.network(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
""",
        Invalid("""
import tabnet_lib
from torch.utils.data import DataLoader
class Tabular:
    def __init__(self):
        self.tabnet = tabnet_lib.TabNet(8, 2)

    def explain(self, rows):
        masks = []
        for batch in DataLoader(RowFiles(rows), batch_size=512):
            masks.append(self.tabnet.forward_masks(batch))
        return masks
""", evidence="unresolved"),
        Invalid("""
import torch
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder
def _step(net, opt, batch):
    net(batch).mean().backward()
    opt.step()

def epoch(net, opt, folder):
    for images in DataLoader(ImageFolder(folder), batch_size=32):
        _step(net, opt, images)

def validate_and_tune(net, criterion, root):
    for x, y in DataLoader(ImageFolder(root), batch_size=64):
        criterion(net(x), y).backward()
""", count=2),
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
        """
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset
class Mapped(Dataset):
    def __init__(self, path):
        self.rows = np.load(path, mmap_mode="r")

    def __getitem__(self, i):
        return torch.from_numpy(self.rows[i])

class Lines(IterableDataset):
    def __init__(self, paths):
        self.paths = paths

    def __iter__(self):
        for p in self.paths:
            yield torch.load(p)

def step(model, batch):
    model(batch).mean().backward()

def fit(model, path, paths):
    for batch in DataLoader(Mapped(path), batch_size=32):
        step(model, batch)
    stream = DataLoader(Lines(paths))
    for batch in stream:
        step(model, batch)
""",
        """
from torch.utils.data import DataLoader
from .data import Shards
def make_loader(root):
    return DataLoader(Shards(root), batch_size=8)
""",
        """
import torch
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder
def test_collects_then_trains(model, tmp_path):
    loader = DataLoader(ImageFolder(tmp_path), batch_size=4)
    seen = []
    for images, labels in loader:
        seen.append(labels)
    for images, labels in loader:
        model(images).sum().backward()
""",
        Invalid("""
import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset
class Lazy(Dataset):
    def __init__(self, path, simulate):
        self.rows = h5py.File(path, "r")["x"]
        self.mapped = load_table(path, mmap_mode="r")
        self.sim = simulate

    def __getitem__(self, k):
        return self.rows[k], self.mapped[k]

class Base(Dataset):
    def __getitem__(self, index):
        raise NotImplementedError

class Held(Base):
    def __init__(self, n):
        self.x = torch.randn(n, 2)

    def __getitem__(self, index):
        return self.x[index]

class FromFiles(Base):
    def __init__(self, files):
        self.files = files

    def __getitem__(self, index):
        return torch.load(self.files[index])

class Cached(IterableDataset):
    def __init__(self, paths):
        self.paths = paths
        self.cache = {}

    def __iter__(self):
        for p in self.paths:
            self.cache[p] = torch.load(p)
            yield self.cache[p]

def fit(model, path, simulate, data: Base, paths):
    for loader in (DataLoader(Lazy(path, simulate)), DataLoader(data), DataLoader(Cached(paths))):
        for batch in loader:
            model(batch).sum().backward()
""", count=3),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if ctx.call_name(node) != "torch.utils.data.DataLoader":
            return
        if any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
            return
        workers = argument(node, "num_workers", 5)
        if not (workers is None or is_const(workers, 0)) or _in_memory(argument(node, "dataset", 0), ctx):
            return
        if consumed_with_work(node, ctx):
            yield self.hit(node)


_TENSOR_DATASETS = {"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"}
_WRAPPERS = {  # datasets made of other datasets: in memory when those are
    "torch.utils.data.Subset", "torch.utils.data.dataset.Subset", "torch.utils.data.random_split",
    "torch.utils.data.dataset.random_split", "torch.utils.data.ConcatDataset",
    "torch.utils.data.dataset.ConcatDataset", "torch.utils.data.StackDataset",
    "torch.utils.data.dataset.StackDataset",
}


@follows_definitions(False)
def _in_memory(dataset: ast.AST | None, ctx: FileContext, depth: int = 10) -> bool:
    """Whether every value ``dataset`` may be is a dataset of tensors already in memory (see above)."""
    if dataset is None or depth < 0:
        return False
    if isinstance(dataset, _Unpacked):  # ``train, val = random_split(...)``
        return _in_memory(dataset.value, ctx, depth - 1)
    if isinstance(dataset, (ast.Name, ast.Attribute)):
        found = ctx.bindings(dataset)
        return bool(found) and all(_annotated_in_memory(o, ctx) if isinstance(o, ast.arg) else
                                   _in_memory(v, ctx, depth - 1) for o, v in found)
    if isinstance(dataset, (ast.List, ast.Tuple)):  # ConcatDataset([a, b]), or a list of items
        return all(_in_memory(e, ctx, depth - 1) or _item(e, ctx) for e in dataset.elts)
    if isinstance(dataset, ast.ListComp):  # [(x[i], y[i]) for i in range(n)], [i * 2 for i in range(n)]
        return _item(dataset.elt, ctx) or _numbers(dataset, ctx)
    if isinstance(dataset, ast.Subscript):  # random_split(...)[0]
        return _in_memory(dataset.value, ctx, depth - 1)
    if isinstance(dataset, ast.Call):
        qn = ctx.call_name(dataset)
        if qn in _TENSOR_DATASETS:
            return True
        if qn in _WRAPPERS:
            parts = [*dataset.args, *(k.value for k in dataset.keywords if k.arg in ("dataset", "datasets"))]
            return bool(parts) and _in_memory(parts[0], ctx, depth - 1)
        qn = callee(dataset, ctx)
        if qn == "range":
            return True  # Python ints: a batch is a few index operations and a collate
        if qn in ("list", "tuple") and len(dataset.args) == 1 and not dataset.keywords:
            return _in_memory(dataset.args[0], ctx, depth - 1)
        if isinstance(dataset.func, ast.Name) and dataset.func.id in ctx.classes:
            return _class_in_memory(ctx.classes[dataset.func.id], ctx)
        if ctx.calls_project_function_that(dataset, IN_MEMORY_ITEMS):
            return True  # a dataset class of another linted module that serves held items
        name = ctx.project_callee(dataset)
        if name and name[:1].isupper():
            ctx.note(Evidence.UNRESOLVED, f"what `{name}`'s items are is not seen (a class of another module)")
    return resolved_tensor(dataset, ctx)


def _class_in_memory(cls: ast.ClassDef, ctx: FileContext) -> bool:
    """A dataset class of this file whose items are held data, or that feeds the consumer's own state
    (which workers cannot serve)."""
    return (_items_in_memory(cls, ctx) or serves_held_items(cls, _array_roots(ctx))
            or feeds_callers_state(cls, ctx.classes))


def _annotated_in_memory(param: ast.arg, ctx: FileContext) -> bool:
    """A parameter annotated with a dataset class of this file: every concrete class of its family
    (the class and its subclasses here, abstract ``__getitem__`` left out) is in memory."""
    ann = param.annotation
    name = ann.value if isinstance(ann, ast.Constant) and isinstance(ann.value, str) else \
        ann.id if isinstance(ann, ast.Name) else None
    cls = ctx.classes.get(name.strip()) if name else None
    if cls is None:
        return False
    family = concrete_subclasses(cls, ctx.classes)
    return bool(family) and all(_class_in_memory(c, ctx) for c in family)


def _items_in_memory(cls: ast.ClassDef, ctx: FileContext) -> bool:
    """A map-style Dataset class of this file whose ``__getitem__`` only returns tensors it holds
    (``return self.data[index]``, ``return self.x[i], self.y[i]``)."""
    getitem = ctx.method(cls, "__getitem__")
    if getitem is None:
        return False
    returns = [n for n in ctx.walk_scope(getitem.body) if isinstance(n, ast.Return)]
    return bool(returns) and all(r.value is not None and _item(r.value, ctx) for r in returns)


def _array_roots(ctx: FileContext) -> dict[str, str]:
    found = ctx.memo.get("array_roots")
    if found is None:
        found = ctx.memo["array_roots"] = array_aliases(ctx.tree)
    return found  # type: ignore[return-value]


def _numbers(comp: ast.ListComp, ctx: FileContext) -> bool:
    """``[i * 2 for i in range(n)]``: numbers made from the loop variables of ranges and constants."""
    if not all(callee(g.iter, ctx) == "range" for g in comp.generators):
        return False
    bound = {n.id for g in comp.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
    return all(isinstance(n, (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Tuple, ast.operator,
                              ast.unaryop, ast.expr_context))
               and (not isinstance(n, ast.Name) or n.id in bound) for n in ast.walk(comp.elt))


def _item(expr: ast.AST, ctx: FileContext) -> bool:
    """A tensor already in memory, a Python number, or a tuple / list / dict of them."""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, (int, float, bool)) and not isinstance(expr.value, str)
    if isinstance(expr, (ast.Tuple, ast.List)):
        return bool(expr.elts) and all(_item(e, ctx) for e in expr.elts)
    if isinstance(expr, ast.Dict):
        return bool(expr.values) and all(_item(v, ctx) for v in expr.values)
    return resolved_tensor(expr, ctx)
