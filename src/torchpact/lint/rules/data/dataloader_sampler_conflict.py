from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext, argument, is_const
from torchpact.lint.rule import Hit, Invalid, Rule, last_names
from torchpact.lint.analysis.following import follows_definitions

DATALOADERS = {"torch.utils.data.DataLoader"}
# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, drop_last)
POSITIONS = {"batch_size": 1, "shuffle": 2, "sampler": 3, "batch_sampler": 4, "drop_last": 8}

SAMPLER_ERROR = "sampler option is mutually exclusive with shuffle"
BATCH_SAMPLER_ERROR = "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last"


class DataloaderSamplerConflict(Rule):
    """`DataLoader` is given `shuffle=True` together with a `sampler`, or a `batch_sampler` together with
    `batch_size` / `shuffle` / `sampler` / `drop_last`.

    ## What it does
    Flags `DataLoader(...)` calls that pass `shuffle=True` and a `sampler` (or a `batch_sampler`),
    and calls that pass a `batch_sampler` together with a `batch_size` other than 1, `sampler=`, or
    `drop_last=True` — keyword or positional. A sampler that is literally `None` is not flagged. A
    sampler bound to `None` on one path and to a sampler on another (`DistributedSampler(ds) if
    distributed else None`) is a `warning`: only that path raises; the `error` is kept for calls
    that raise on every path. `sampler if batch_sampler is None else None` is the correct idiom.
    The options are judged per path, by the definitions that reach the call together: a
    `batch_sampler` and a `sampler` set in the two branches of one `if`, or a branch that sets the
    batch sampler and then `sampler = None` (`if isinstance(s, BatchSampler): batch_sampler = s;
    sampler = None`), never meet, and are not a conflict (torch raises only when both are given on
    one construction).

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
    requires = (
        "the loader is a resolved `torch.utils.data.DataLoader`",
        "the conflicting arguments are there on every path (for `error`), and the sampler is built by a "
        "resolved constructor, not an unresolved call or attribute that may give None",
    )
    facts = ("dataloader-shuffle-with-sampler-raises",)
    message = ("`DataLoader` gets `shuffle=True` and a `sampler`: "
               "torch raises `ValueError: sampler option is mutually exclusive with shuffle`")
    fix_hint = ("drop `shuffle=True` and let the sampler shuffle (DistributedSampler shuffles by default), "
                "or pass `shuffle=sampler is None`")
    nodes = (ast.Call,)
    calls = last_names(DATALOADERS)
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
batches = data.DataLoader(dataset, batch_sampler=data.BatchSampler(data.RandomSampler(dataset), 8, False),
                          batch_size=1, drop_last=False)
""",
        """
from torch.utils.data import DataLoader
def build(dataset, sampler=None, **kwargs):
    return DataLoader(dataset, shuffle=True, sampler=sampler, **kwargs)
""",
        """
from torch.utils.data import DataLoader
def build(dataset, sampler, batch_sampler, cfg):
    if batch_sampler is not None:
        batch_sampler = make_batch_sampler(cfg)
    return DataLoader(dataset, sampler=sampler if batch_sampler is None else None,
                      batch_sampler=batch_sampler, **cfg)
""",
        """
from torch.utils.data import BatchSampler, DataLoader, RandomSampler
def loader(dataset, split, size, picked):
    sampler = picked
    if isinstance(picked, BatchSampler):
        size = 1
        batch_sampler = picked
        sampler = None
    else:
        batch_sampler = None
    return DataLoader(dataset=dataset, batch_size=size, sampler=sampler, batch_sampler=batch_sampler,
                      drop_last=split == "train" and batch_sampler is None)
""",
        """
import torch.utils.data as tud
def loader(dataset, by_length, rank):
    if by_length:
        batches = tud.BatchSampler(tud.SequentialSampler(dataset), 8, False)
        order = None
    else:
        batches = None
        order = tud.DistributedSampler(dataset, rank=rank)
    return tud.DataLoader(dataset, 1, False, order, batches)
""",
        """
from torch.utils.data import BatchSampler, DataLoader, RandomSampler
def loaders(datasets, grouped):
    out = []
    for ds in datasets:
        sampler = RandomSampler(ds)
        batch_sampler = None
        if grouped:
            batch_sampler = BatchSampler(sampler, 4, drop_last=False)
            sampler = None
        out.append(DataLoader(ds, sampler=sampler, batch_sampler=batch_sampler))
    return out
""",
    ]
    invalid = [
        Invalid("""
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
loader = DataLoader(dataset, batch_size=32, shuffle=True, sampler=sampler)
""", evidence=Evidence.MUST),
        Invalid("""
import torch
from torch.utils.data import DataLoader
def loaders(dataset, args):
    sampler = build_sampler(dataset, args)
    return DataLoader(dataset, batch_size=32, shuffle=True, sampler=sampler)
""", severity=Severity.INFO, evidence=Evidence.UNRESOLVED),  # build_sampler() may return None
        Invalid("""
import torch.utils.data as tud
def main(args, dataset):
    train_sampler = tud.DistributedSampler(dataset) if args.distributed else None
    return tud.DataLoader(dataset, args.batch_size, True, train_sampler)
""", severity=Severity.WARNING, evidence=Evidence.MAY),
        Invalid(
            """
from torch.utils.data import BatchSampler, DataLoader, RandomSampler
batch_sampler = BatchSampler(RandomSampler(dataset), batch_size=16, drop_last=True)
loader = DataLoader(dataset, batch_size=16, batch_sampler=batch_sampler)
loader2 = DataLoader(dataset, batch_sampler=batch_sampler, shuffle=True, drop_last=True)
""",
            count=2,
        ),
        Invalid("""
from torch.utils.data import BatchSampler, DataLoader, RandomSampler
def loader(dataset, picked, grouped):
    sampler = RandomSampler(dataset)
    if grouped:
        batch_sampler = BatchSampler(sampler, 4, drop_last=False)
    else:
        batch_sampler = None
    first = DataLoader(dataset, sampler=sampler, batch_sampler=batch_sampler)
    if picked is None:
        sampler = None
    return first, DataLoader(dataset, sampler=sampler, batch_sampler=batch_sampler)
""", count=2, severity=Severity.WARNING, evidence=Evidence.MAY),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if ctx.call_name(node) not in DATALOADERS:
            return
        args = {name: argument(node, name, pos) for name, pos in POSITIONS.items()}
        shuffle, sampler, batch_sampler = args["shuffle"], args["sampler"], args["batch_sampler"]
        batch_paths = _sampler_paths(batch_sampler, ctx)
        if batch_paths:
            guards = frozenset(n.id for n in ast.walk(batch_sampler) if isinstance(n, ast.Name))  # type: ignore[arg-type]
            conflicts = []
            paths = [batch_paths]
            if shuffle is not None and _truthy_const(shuffle):
                conflicts.append("shuffle=True")
            sampler_paths = _sampler_paths(sampler, ctx, guards)
            if sampler_paths and not _ever_together(batch_sampler, sampler, ctx):
                sampler_paths = NEVER  # set on different paths (``batch_sampler = s; sampler = None``)
            if sampler_paths:
                conflicts.append("sampler")
                paths.append(sampler_paths)
            size = args["batch_size"]
            if isinstance(size, ast.Constant) and size.value != 1:
                conflicts.append(f"batch_size={size.value!r}")
            if args["drop_last"] is not None and is_const(args["drop_last"], True):
                conflicts.append("drop_last=True")
            if conflicts:
                _note_unresolved(ctx, batch_sampler, "batch sampler")
                if sampler_paths:
                    _note_unresolved(ctx, sampler, "sampler", guards)
                yield self._conflict(
                    node, min(paths),
                    f"`DataLoader` gets a `batch_sampler` together with {', '.join(conflicts)}", BATCH_SAMPLER_ERROR,
                    fix_hint="the batch sampler already decides batch size, order and dropping: "
                             "pass only `batch_sampler=` (set those options on the BatchSampler)",
                )
            return
        if shuffle is not None and _truthy_const(shuffle):
            sampler_paths = _sampler_paths(sampler, ctx)
            if sampler_paths:
                _note_unresolved(ctx, sampler, "sampler")
                yield self._conflict(node, sampler_paths, "`DataLoader` gets `shuffle=True` and a `sampler`",
                                     SAMPLER_ERROR, subject=ctx.segment(sampler) or None)

    def _conflict(self, node: ast.Call, paths: int, what: str, error: str, **kw) -> Hit:
        """An error when every path raises; a warning when only some do (``... if distributed else None``)."""
        if paths == ALWAYS:
            return self.hit(node, message=f"{what}: torch raises `ValueError: {error}`", evidence=Evidence.MUST, **kw)
        return self.hit(node, message=f"{what} on some paths: there torch raises `ValueError: {error}`",
                        evidence=Evidence.MAY, **kw)


def _truthy_const(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is not None and bool(node.value)


NEVER, SOMETIMES, ALWAYS = 0, 1, 2


@follows_definitions(NEVER)
def _sampler_paths(expr: ast.AST | None, ctx: FileContext, guards: frozenset[str] = frozenset(),
                   seen: frozenset[int] = frozenset()) -> int:
    """On how many of the paths that reach it ``expr`` is something other than ``None``: NEVER,
    SOMETIMES or ALWAYS. A conditional whose test names one of ``guards`` (the other argument, as in
    ``sampler if batch_sampler is None else None``) is the correct idiom: NEVER."""
    if expr is None or is_const(expr, None) or id(expr) in seen or isinstance(expr, ast.Constant):
        return NEVER
    seen = seen | {id(expr)}
    if isinstance(expr, ast.IfExp):
        if guards & {n.id for n in ast.walk(expr.test) if isinstance(n, ast.Name)}:
            return NEVER
        return _combine([_sampler_paths(expr.body, ctx, guards, seen), _sampler_paths(expr.orelse, ctx, guards, seen)])
    if isinstance(expr, ast.Name):
        # a bare parameter or an unknown name: what the caller passes is not visible here
        values = [v for _, v in ctx.bindings(expr) if v is not None]
        return _combine([_sampler_paths(v, ctx, guards, seen) for v in values]) if values else NEVER
    return ALWAYS


def _ever_together(a: ast.AST | None, b: ast.AST | None, ctx: FileContext) -> bool:
    """Whether a definition giving name ``a`` a sampler and one giving name ``b`` a sampler can reach the
    call on one path. They cannot when they sit in the two branches of one ``if``, or when one sits in
    a branch that then rebinds the other name (``if ...: batch_sampler = s; sampler = None``) and
    the other's definition lies outside that branch. Anything but two plain names: assumed they can."""
    if not (isinstance(a, ast.Name) and isinstance(b, ast.Name)):
        return True
    def given(name: ast.Name) -> list[ast.AST]:
        return [o for o, v in ctx.bindings(name) if v is not None and _sampler_paths(v, ctx)]
    return any(not ctx.exclusive(da, db) and not _rebinds_after(da, b.id, db, ctx)
               and not _rebinds_after(db, a.id, da, ctx) for da in given(a) for db in given(b))


def _rebinds_after(definition: ast.AST, name: str, other: ast.AST, ctx: FileContext) -> bool:
    """``definition`` sits in an ``if`` branch that binds ``name`` again after it, and ``other`` (the
    definition of ``name`` in question) lies outside that branch: no path carries both to the call."""
    child = definition
    for anc in ctx.ancestors(definition):
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Module)):
            return False
        if isinstance(anc, ast.If):
            block = anc.body if child in anc.body else anc.orelse if child in anc.orelse else []
            later = block[block.index(child) + 1:] if child in block else []
            rebinds = any(isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name
                                                                 for t in stmt.targets) for stmt in later)
            inside = any(other is n for stmt in block for n in ast.walk(stmt))
            if rebinds and not inside:
                return True
        child = anc
    return False


def _note_unresolved(ctx: FileContext, expr: ast.AST | None, what: str, guards: frozenset[str] = frozenset()) -> None:
    """Where a value taken for "not None" is an unresolved call, an attribute or a parameter's default,
    it may be None after all: the evidence is unresolved."""
    leaf = _unresolved_leaf(expr, ctx, guards, frozenset())
    if leaf is not None:
        ctx.note(Evidence.UNRESOLVED, f"the {what} `{ctx.segment(leaf)}` is not resolved: it may be None")


@follows_definitions(None)
def _unresolved_leaf(expr: ast.AST | None, ctx: FileContext, guards: frozenset[str],
                     seen: frozenset[int]) -> ast.AST | None:
    if expr is None or isinstance(expr, ast.Constant) or id(expr) in seen:
        return None
    seen = seen | {id(expr)}
    if isinstance(expr, ast.IfExp):
        if guards & {n.id for n in ast.walk(expr.test) if isinstance(n, ast.Name)}:
            return None
        return _unresolved_leaf(expr.body, ctx, guards, seen) or _unresolved_leaf(expr.orelse, ctx, guards, seen)
    if isinstance(expr, ast.Name):
        for _, v in ctx.bindings(expr):
            found = _unresolved_leaf(v, ctx, guards, seen) if v is not None else None
            if found is not None:
                return found
        return None
    if isinstance(expr, ast.Call) and (ctx.call_name(expr) is not None or (
            isinstance(expr.func, ast.Name) and expr.func.id in ctx.classes)):
        return None  # a constructor (or torch call) resolved through the imports, or a class of this file
    if isinstance(expr, (ast.List, ast.Tuple, ast.ListComp, ast.GeneratorExp)):
        return None
    return expr


def _combine(paths: list[int]) -> int:
    if all(p == ALWAYS for p in paths):
        return ALWAYS
    return NEVER if all(p == NEVER for p in paths) else SOMETIMES
