"""DataLoaders under distributed training: the same shuffled order every epoch, and ranks with
different numbers of batches.

``DataLoader.__iter__`` is wrapped for the run (restored at the end; the wrapper calls the original
and returns its iterator unchanged). Each pass over a loader is recorded with the user's line that
started it; a pass *trains* when optimizer steps happen while it yields batches (the iterator's own
batch counter moves between two steps).

- TP501: a pass over a loader whose shuffling ``DistributedSampler`` draws the same permutation
  as an earlier pass that trained — same dataset, same ``seed + epoch`` (the sampler seeds its
  generator with exactly that), same rank and world size. Reported at the replaying pass's first
  optimizer step, when the sampler's epoch for that pass is settled.
- TP653: with more than one rank, rank 0 publishes ``len(loader)`` for each pass started at a given
  line (through the job's store, ``ddp_common.Exchange``); the other ranks compare theirs once the
  pass trains under DDP, and report a difference before the last batch hangs.

Cost: nothing per batch; per step, one attribute read per live loader iterator (usually one).
"""

from __future__ import annotations

import weakref
import zlib
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.frames import user_location
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers.ddp_common import Exchange, is_ddp, plural, world

SAME_ORDER = Check(
    code="TP501",
    category=Category.DATA,
    severity=Severity.WARNING,
    summary="A shuffling DistributedSampler replays the same order: `set_epoch` is missing.",
    doc="""## What it does
Records every pass over a DataLoader whose sampler is a shuffling `DistributedSampler`, with the
value that decides its order (`seed + epoch`, for that dataset, rank and world size). When a pass
starts that would replay the order of an earlier pass during which the model was trained, it
reports the line of the loop, with the sampler's epoch.

## Why is this bad?
`DistributedSampler` shuffles with a generator seeded by `seed + epoch`, and `epoch` changes only
through `sampler.set_epoch(epoch)`. Without it torch 2.13 yields exactly the same permutation every
epoch, so each rank sees the same shard in the same order every epoch: the shuffle happens once, and
SGD loses the per-epoch reshuffle it relies on. A new sampler built each epoch starts at epoch 0 again.
Nothing warns about it.

## How to fix
Call `sampler.set_epoch(epoch)` (or `loader.sampler.set_epoch(epoch)`) at the start of every
epoch, before iterating the loader; when the sampler is rebuilt each epoch, pass it the epoch too.""",
)

UNEVEN_BATCHES = Check(
    code="TP653",
    category=Category.DISTRIBUTED,
    severity=Severity.WARNING,
    summary="Ranks iterate different numbers of batches under DDP: the last step hangs.",
    doc="""## What it does
With more than one rank, compares `len(loader)` of each training pass across ranks (each rank with
rank 0, for the pass started at the same line of the script), and reports when they differ while a
DDP model is trained on those batches (outside `Join`).

## Why is this bad?
Under `DistributedDataParallel` every training batch ends in a gradient all-reduce that all ranks
must join. A rank with more batches runs a step that the others never run: it waits in DDP's
all-reduce (or its buffer broadcast) while they have moved on to their next collective or exited,
and the job hangs until the collective timeout (30 minutes by default). This happens when data is
sharded by hand (`data[rank::world]`) with a length that does not divide evenly, or when each rank
reads its own files.

## How to fix
Give every rank the same number of batches: use `DistributedSampler` (it pads to equal shards, or
drops the remainder with `drop_last=True`), or trim hand-made shards to the same length. For inputs
that are uneven by nature, wrap the loop in `with torch.distributed.algorithms.join.Join([ddp]):`.""",
)


class _Pass:
    """One pass over a DataLoader."""

    def __init__(self, iterator: weakref.ref, loader: weakref.ref, length: int | None,
                 site: tuple[str | None, int | None], key: str, yielded: int) -> None:
        self.iterator = iterator
        self.loader = loader
        self.length = length
        self.site = site
        self.key = key
        self.order: tuple | None = None
        self.yielded = yielded
        self.trained = False
        self.compared = False


def _order_key(loader: Any) -> tuple | None:
    """What decides a shuffling DistributedSampler's permutation, or None for other samplers."""
    from torch.utils.data.distributed import DistributedSampler

    sampler = getattr(loader, "sampler", None)
    if not isinstance(sampler, DistributedSampler):
        sampler = getattr(getattr(loader, "batch_sampler", None), "sampler", None)
    if not isinstance(sampler, DistributedSampler) or not sampler.shuffle:
        return None
    dataset = sampler.dataset
    try:
        size = len(dataset)
    except TypeError:
        return None
    return (id(dataset), size, sampler.seed + sampler.epoch, sampler.num_replicas, sampler.rank,
            sampler.epoch, sampler.seed, id(sampler))


class DdpSamplerWatcher(Watcher):
    """TP501 (same order every epoch) and TP653 (different numbers of batches across ranks)."""

    name = "ddp_sampler"
    checks = (SAME_ORDER, UNEVEN_BATCHES)

    def __init__(self) -> None:
        super().__init__()
        self._original: Any = None
        self._passes: list[_Pass] = []
        self._trained_orders: dict[tuple, tuple[_Pass, int]] = {}
        self._ordinals: dict[str, int] = {}
        self._unresolved: list[_Pass] = []

    # ------------------------------------------------------------------ the wrapper
    def attach(self, session: Any) -> None:
        super().attach(session)
        from torch.utils.data import DataLoader

        original = DataLoader.__iter__
        watcher = weakref.ref(self)

        def __iter__(loader: Any) -> Any:
            iterator = original(loader)
            w = watcher()
            if w is not None and w._original is original and not w.session.closed:
                try:
                    w._started(loader, iterator)
                except Exception:  # observing must never break the user's loop
                    pass
            return iterator

        __iter__.__wrapped__ = original  # type: ignore[attr-defined]
        self._original = original
        DataLoader.__iter__ = __iter__  # type: ignore[method-assign]

    def on_close(self) -> None:
        from torch.utils.data import DataLoader

        if self._original is not None:
            if getattr(DataLoader.__iter__, "__wrapped__", None) is self._original:
                DataLoader.__iter__ = self._original  # type: ignore[method-assign]
            self._original = None
        self._update()
        self._compare_lengths()

    def on_step_end(self, step: int) -> None:
        self._update()
        if self._unresolved and self.session.sampled:
            self._compare_lengths()

    # ------------------------------------------------------------------ passes
    def _started(self, loader: Any, iterator: Any) -> None:
        site = user_location(3)
        try:
            length = len(loader)
        except TypeError:
            length = None
        where = f"{site[0]}:{site[1]}"
        ordinal = self._ordinals.get(where, 0)
        self._ordinals[where] = ordinal + 1
        self._passes = [p for p in self._passes if p.iterator() is not None and p.iterator() is not iterator]
        current = _Pass(iterator=weakref.ref(iterator), loader=weakref.ref(loader), length=length, site=site,
                        key=f"len/{zlib.crc32(where.encode()):08x}/{ordinal}",
                        yielded=getattr(iterator, "_num_yielded", 0))
        self._passes.append(current)
        self._publish_length(current)

    def _update(self) -> None:
        for p in self._passes:
            it = p.iterator()
            if it is None:
                continue
            n = getattr(it, "_num_yielded", 0)
            if n > p.yielded:
                p.yielded = n
                if not p.trained:
                    p.trained = True
                    self._first_step(p)

    def _first_step(self, p: _Pass) -> None:
        """A pass just fed its first optimizer step: its permutation is drawn, its sampler's epoch is final."""
        loader = p.loader()
        p.order = _order_key(loader) if loader is not None else None
        if p.order is None:
            return
        self._check_order(p)
        self._trained_orders.setdefault(p.order[:5], (p, self.session.step))

    # ------------------------------------------------------------------ TP501
    def _check_order(self, current: _Pass) -> None:
        if current.order is None:
            return
        earlier = self._trained_orders.get(current.order[:5])
        if earlier is None or earlier[0] is current:
            return
        before, step = earlier
        epoch, seed = current.order[5], current.order[6]
        same_sampler = before.order is not None and before.order[7] == current.order[7]
        if same_sampler:
            why = (f"its epoch is still {epoch} (`set_epoch` was not called with a new epoch), so it draws the same "
                   f"permutation (seed {seed} + epoch {epoch})")
        else:
            why = (f"a new DistributedSampler was built with the same seed ({seed}) and epoch ({epoch}), so it draws "
                   "the same permutation")
        self.session.report(
            SAME_ORDER,
            f"this pass over the DataLoader replays the exact sample order of the pass that trained from step {step}: "
            f"{why}; every epoch sees the same shard in the same order",
            subject="set_epoch", path=current.site[0], line=current.site[1],
            fix="call `sampler.set_epoch(epoch)` at the start of every epoch, before iterating the loader",
            key=("order", current.order[:5]), epoch=epoch, seed=seed)

    # ------------------------------------------------------------------ TP653
    def _publish_length(self, current: _Pass) -> None:
        if current.length is None:
            return
        where = world()
        if where is None or where[1] < 2:
            return
        exchange = Exchange.get()
        if exchange is None:
            return
        if exchange.rank == 0:
            exchange.put(current.key, str(current.length))
        else:
            self._unresolved.append(current)
        self._unresolved = self._unresolved[-16:]

    def _compare_lengths(self) -> None:
        exchange = Exchange.get() if self._unresolved else None
        if exchange is None:
            return
        still = []
        for p in self._unresolved:
            if not p.trained:
                if p.iterator() is not None:
                    still.append(p)
                continue
            values = exchange.get_ready([p.key])
            if values is None:
                still.append(p)
                continue
            theirs = int(values[0])
            if theirs != p.length:
                self._report_uneven(p, theirs, exchange.rank)
        self._unresolved = still

    def _report_uneven(self, p: _Pass, theirs: int, rank: int) -> None:
        ddps = [m for m in self.session.names.root_modules() if is_ddp(m)]
        if not ddps:
            return  # without DDP (or with each rank training alone) a different count does not hang
        if any(getattr(getattr(d, "_join_config", None), "enable", False) for d in ddps):
            return  # under Join, DDP shadows the missing collectives
        more = p.length > theirs
        self.session.report(
            UNEVEN_BATCHES,
            f"the DataLoader iterated here yields {plural(p.length, 'batch')} on rank {rank} but "
            f"{theirs} on rank 0: every DDP training step ends in a gradient all-reduce that all ranks must join, so "
            + ("this rank's last steps wait for ranks that have already finished"
               if more else "rank 0's last steps wait for this rank, which has already finished")
            + ": the job hangs at the end of the pass until the collective timeout",
            subject="len(loader)", path=p.site[0], line=p.site[1],
            fix="give every rank the same number of batches: DistributedSampler (pads, or drop_last=True), or trim "
                "hand-made shards to the same length; for inputs uneven by nature, wrap the loop in "
                "`with torch.distributed.algorithms.join.Join([ddp]):`",
            key=("uneven", p.key.split("/")[1]), batches=p.length, rank0_batches=theirs)
