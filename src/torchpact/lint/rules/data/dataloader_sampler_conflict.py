from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext, argument, is_const
from torchpact.lint.rule import Hit, Invalid, Rule, last_names

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


def _note_unresolved(ctx: FileContext, expr: ast.AST | None, what: str, guards: frozenset[str] = frozenset()) -> None:
    """Where a value taken for "not None" is an unresolved call, an attribute or a parameter's default,
    it may be None after all: the evidence is unresolved."""
    leaf = _unresolved_leaf(expr, ctx, guards, frozenset())
    if leaf is not None:
        ctx.note(Evidence.UNRESOLVED, f"the {what} `{ctx.segment(leaf)}` is not resolved: it may be None")


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
