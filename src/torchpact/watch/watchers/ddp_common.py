"""What the ``ddp_*`` watchers share; no watcher lives here.

- ``world()``: this rank and the world size of the initialised default process group.
- ``Exchange``: values passed between ranks through the job's own store (the default group's
  ``TCPStore``, on its own connection). Watchers never run a collective of their own: a collective
  that one rank skips (uneven inputs under ``Join``, an early exit, an optimizer stepped on one rank
  only) would pair with the user's next collective on the other ranks and hang or corrupt it. A
  store read is point-to-point, and during training a watcher only reads keys that ``check`` says
  are there, so it never waits for a rank that is late. At the end (``on_close``) a comparison must
  not depend on how fast the ranks ran: each rank publishes what it has, then says it is done
  (``close``), and only then waits (``wait_for``) for the other ranks' values until they are there,
  or their writers are done, or a generous deadline passes (``TORCHPACT_EXCHANGE_WAIT``, 1800 s, the
  default collective timeout); what did not come is reported as not compared (TP658, ``not_compared``),
  never left out in silence. Every rank publishes before it waits, in every watcher, so no two ranks
  wait for each other.
- DDP wrappers: recognising them, finding the one that wraps a module, and the order in which DDP's
  reducer numbers its parameters.
- ``bit_checksums``: an exact, order-independent checksum of each tensor's bits.
"""

from __future__ import annotations

import datetime
import gc
import os
import threading
import time
import zlib
from typing import Any, Iterable, Sequence

from torchpact.findings import Category, Severity
from torchpact.watch.watcher import Check

_PREFIX = "torchpact/"
EXCHANGE_WAIT_S = 1800.0  # TORCHPACT_EXCHANGE_WAIT: as long as gloo's and NCCL's default collective timeout
POLL_S = 0.25             # store.check between waits: store.wait's own timeouts log a warning each time


def exchange_wait() -> float:
    """How long a rank waits at the end for the values of the others (``TORCHPACT_EXCHANGE_WAIT`` seconds)."""
    try:
        return max(0.0, float(os.environ.get("TORCHPACT_EXCHANGE_WAIT", EXCHANGE_WAIT_S)))
    except ValueError:
        return EXCHANGE_WAIT_S


def world() -> tuple[int, int] | None:
    """``(rank, world_size)`` of the initialised default process group, else None."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank(), dist.get_world_size()


def ddp_class() -> Any:
    from torch.nn.parallel import DistributedDataParallel  # (sys.modules keeps it: called once per class)

    return DistributedDataParallel


# The one cache here outside a session: the answer is a fact of the class, the same in every session.
_IS_DDP: dict[type, bool] = {}


def is_ddp(module: Any) -> bool:
    # Called at every model call: DDP is an ABC (Joinable), so isinstance() runs ABCMeta's Python
    # __instancecheck__ (~1 µs); the answer per class is kept instead.
    cls = type(module)
    known = _IS_DDP.get(cls)
    if known is None:
        known = _IS_DDP[cls] = issubclass(cls, ddp_class())
    return known


def all_ddps() -> list[Any]:
    """Every live DDP wrapper, found by one pass over the garbage collector's objects (~0.1 s: call rarely)."""
    ddp = ddp_class()
    return [o for o in gc.get_objects() if issubclass(type(o), ddp)]  # type(): no __class__ lookups


def group_ranks(ddp: Any) -> list[int]:
    """Global ranks of the DDP's process group (a subgroup under hybrid parallelism)."""
    import torch.distributed as dist

    try:
        return sorted(dist.get_process_group_ranks(ddp.process_group))
    except Exception:  # a group this rank cannot resolve: compare with nobody
        return []


def reducer_parameters(ddp: Any) -> list[tuple[str, Any]]:
    """``(name, parameter)`` in the order of DDP's reducer, whose indices its errors print."""
    ignore = getattr(ddp, "parameters_to_ignore", set())
    out: list[tuple[str, Any]] = []
    seen: set[int] = set()
    for module_name, module in ddp.module.named_modules():
        for param_name, param in module.named_parameters(recurse=False):
            if not param.requires_grad or f"{module_name}.{param_name}" in ignore or id(param) in seen:
                continue
            seen.add(id(param))
            out.append((f"{module_name}.{param_name}" if module_name else param_name, param))
    return out


def model_key(ddp: Any) -> str:
    """The same short key on every rank for the same model (class, parameter and buffer names)."""
    names = [n for n, _ in ddp.module.named_parameters()] + [n for n, _ in ddp.module.named_buffers()]
    digest = zlib.crc32("\n".join(names).encode())
    return f"{type(ddp.module).__name__}-{len(names)}-{digest:08x}"


# ---------------------------------------------------------------------------------------- checksums
_INT_VIEW: dict[Any, Any] = {}


def _int_view(dtype: Any) -> Any:
    """The integer dtype of the same size, to read a tensor's bits."""
    import torch

    if not _INT_VIEW:
        _INT_VIEW.update({torch.float32: torch.int32, torch.float64: torch.int64, torch.float16: torch.int16,
                          torch.bfloat16: torch.int16, torch.int64: torch.int64, torch.int32: torch.int32,
                          torch.int16: torch.int16, torch.int8: torch.int8, torch.uint8: torch.uint8,
                          torch.bool: torch.uint8})
    return _INT_VIEW.get(dtype)


def bit_checksums(tensors: Sequence[Any]) -> list[int | None]:
    """One int per tensor: the int64 sum of its bits, exact whatever the reduction order or thread count.

    Two replicas that DDP keeps in sync are bitwise equal, so any difference is real drift. None for
    a missing tensor (a parameter without ``.grad``), ``-1`` for a dtype it cannot read. One host
    read-back per device.
    """
    import torch

    out: list[int | None] = [None] * len(tensors)
    by_device: dict[Any, list[tuple[int, Any]]] = {}
    with torch.no_grad():
        for i, t in enumerate(tensors):
            if t is None:
                continue
            view = _int_view(t.dtype)
            if view is None or t.is_sparse or t.layout != torch.strided:
                out[i] = -1
                continue
            bits = t.detach().view(view)
            by_device.setdefault(t.device, []).append((i, bits.sum(dtype=torch.int64)))
        for items in by_device.values():
            for (i, _), value in zip(items, torch.stack([s for _, s in items]).tolist(), strict=True):
                out[i] = value
    return out


def norms(tensors: Sequence[Any]) -> list[float]:
    """The L2 norm of each floating-point tensor (0.0 for others), batched per device and dtype."""
    import torch

    out = [0.0] * len(tensors)
    groups: dict[tuple, list[int]] = {}
    for i, t in enumerate(tensors):
        if t is not None and t.is_floating_point() and not t.is_sparse and t.layout == torch.strided:
            groups.setdefault((t.device, t.dtype), []).append(i)
    with torch.no_grad():
        for idx in groups.values():
            values = torch._foreach_norm([tensors[i].detach() for i in idx])
            for i, v in zip(idx, torch.stack([v.float() for v in values]).tolist(), strict=True):
                out[i] = v
    return out


# ---------------------------------------------------------------------------------------- exchange
class Exchange:
    """Small values shared between ranks through the job's store; only ``wait`` blocks, with a deadline."""

    _cache: dict[tuple[int, str], "Exchange"] = {}
    _lock = threading.Lock()

    def __init__(self, store: Any, rank: int, world_size: int) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size

    @classmethod
    def get(cls, user: str = "main") -> "Exchange | None":
        """This process's exchange for ``user`` (one store connection each: a thread gets its own).

        None until the default process group is initialised with more than one rank; once made, it
        keeps working after ``destroy_process_group`` (the store outlives the group).
        """
        key = (os.getpid(), user)
        with cls._lock:
            found = cls._cache.get(key)
            if found is not None:
                return found
            where = world()
            if where is None or where[1] < 2:
                return None
            try:
                import torch.distributed as dist
                from torch.distributed.distributed_c10d import _get_default_store

                base = _get_default_store()
                try:
                    base = base.clone()  # our own connection: never interleaved with c10d's own use
                except Exception:  # a store without clone (FileStore): share it
                    pass
                store = dist.PrefixStore(_PREFIX, base)
                store.set_timeout(datetime.timedelta(seconds=30))
            except Exception:
                return None
            found = cls._cache[key] = Exchange(store, *where)
            return found

    # Every call swallows store errors: the store goes away with the launcher (a failed job), and a
    # watcher must then give up quietly, not crash the rank's shutdown.
    def put(self, key: str, value: bytes | str) -> bool:
        try:
            self.store.set(key, value)
            return True
        except Exception:
            return False

    def get_ready(self, keys: Sequence[str]) -> list[bytes] | None:
        """The values of ``keys`` if they are all there now; None otherwise (never waits)."""
        try:
            if not keys or not self.store.check(list(keys)):
                return None
            return list(self.store.multi_get(list(keys)))
        except Exception:
            return None

    def close(self, user: str) -> None:
        """Say that this rank will publish no more of ``user``'s keys (a watcher's name)."""
        self.put(f"closed/{user}/{self.rank}", "1")

    def wait_for(self, keys: Sequence[str], writers: Iterable[int], user: str,
                 seconds: float) -> tuple[dict[str, bytes], str]:
        """The values of those of ``keys`` that are there once all of them are (``"all"``), or once every rank
        of ``writers`` has closed ``user``'s keys (``"closed"``: the missing ones will never come), or after
        ``seconds`` (``"timeout"``); ``"gone"`` when the store stopped answering (the job is ending)."""
        closed = [f"closed/{user}/{r}" for r in writers]
        deadline = time.monotonic() + seconds
        while True:
            try:
                done = not closed or self.store.check(closed)  # first: a writer publishes, then closes
                have = [k for k in keys if self.store.check([k])]
                values = dict(zip(have, self.store.multi_get(have), strict=True)) if have else {}
            except Exception:
                return {}, "gone"
            if len(have) == len(keys):
                return values, "all"
            if done:
                return values, "closed"
            if time.monotonic() >= deadline:
                return values, "timeout"
            time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))

    def add(self, key: str, amount: int) -> int | None:
        try:
            return int(self.store.add(key, amount))
        except Exception:
            return None

    def delete(self, *keys: str) -> None:
        for key in keys:
            try:
                self.store.delete_key(key)
            except Exception:
                pass


NOT_COMPARED = Check(
    code="TP658",
    category=Category.DISTRIBUTED,
    severity=Severity.INFO,
    summary="A check across ranks could not compare them: a rank's values did not come; no verdict either way.",
    doc="""## What it does
The checks that compare ranks (replicas drifting apart, stragglers) exchange values through the job's
store. At the end of the run each rank waits for the values it still needs from the others, however
late those ranks are, until they are there, or their ranks say they are done, or
`TORCHPACT_EXCHANGE_WAIT` seconds (1800, gloo's and NCCL's default collective timeout) have passed.
What still did not come is reported here: which check, which steps, which rank, and why.

## Why is this bad?
A comparison that did not happen is not a clean result: the replicas may or may not have drifted.
Without this note, a run on a loaded machine (where one rank ended much later than another) would
look exactly like a clean one.

## How to fix
If that rank was only slow (a long evaluation or checkpoint on rank 0 at the end), raise
`TORCHPACT_EXCHANGE_WAIT`; if it ran fewer steps or failed, see its own findings.""",
)


def not_compared(session: Any, watcher: str, what: str, reason: str, writers: Sequence[int], waited: float,
                 subject: str | None = None) -> None:
    """Report (TP658) that a comparison across ranks did not happen, and why, instead of leaving it out."""
    ranks = ", ".join(map(str, writers))
    who = f"rank {ranks}" if len(writers) == 1 else f"ranks {ranks}"
    why = {"closed": f"{who} ended without publishing them (fewer steps or no such model there)",
           "timeout": f"{who} had not published them after {waited:.0f} s (TORCHPACT_EXCHANGE_WAIT)",
           "gone": "the job's store stopped answering (the job was ending)"}.get(reason, reason)
    session.report(NOT_COMPARED, f"{watcher} did not compare {what}: {why}; this is no verdict either way",
                   subject=subject, key=(watcher, subject),
                   fix="raise TORCHPACT_EXCHANGE_WAIT if that rank was only slow; see its own findings if it failed",
                   not_compared=watcher, reason=reason)


def plural(n: int, word: str) -> str:
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word}{'es' if word.endswith(('ch', 'sh', 's', 'x')) else 's'}"


def differ(n: int, word: str) -> str:
    """``1 parameter differs`` / ``3 parameters differ``."""
    return f"{plural(n, word)} {'differs' if n == 1 else 'differ'}"


def listing(names: Sequence[str], limit: int = 4) -> str:
    shown = ", ".join(f"`{n}`" for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
