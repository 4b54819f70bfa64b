"""Backward: the activation gradients hooked on a recorded step, and the first module that turned them bad.

A tensor hook (never a module backward hook, which would change the graph) is put on every non-leaf
tensor that enters or leaves a module; the hook keeps the gradient (up to the recorder's
``hold_bytes`` in all; past that, each is reduced to its sum). When the gradients about to be applied
are non-finite, the kept gradients are reduced and read; in firing order (backward order), the first
tensor whose gradient is non-finite is the input of the module whose backward produced it: every
gradient downstream of it fired earlier and was finite. A gradient is attributed to the module that
consumes the tensor, which is exact unless the parent also uses that tensor directly (then both are
named).
"""

from __future__ import annotations

import math
import weakref
from typing import Any, NamedTuple

from torchpact.watch.watchers._nonfinite.values import read, reduce


class BwCall:
    """What the backward analysis needs of a module call, without holding any tensor."""

    __slots__ = ("module", "outs", "parent", "root")

    def __init__(self, module: weakref.ref, parent: BwCall | None, root: weakref.ref, outs: list[int]) -> None:
        self.module = module
        self.parent = parent
        self.root = root
        self.outs = outs

    def is_ancestor_of(self, other: BwCall) -> bool:
        p = other.parent
        while p is not None:
            if p is self:
                return True
            p = p.parent
        return False

    def depth(self) -> int:
        d, p = 0, self.parent
        while p is not None:
            d, p = d + 1, p.parent
        return d


class BwTable:
    """The tensors hooked between two optimizer steps, and the reductions of their gradients as they fire.

    ``calls`` holds, per module call, (module, index of the parent call, root, hooked inputs, hooked
    outputs): plain tuples, turned into linked ``BwCall`` objects only when a step needs analysing.
    """

    __slots__ = ("calls", "fired", "open", "reduced", "size")

    def __init__(self, open: bool = True) -> None:
        self.size = 0
        self.calls: list[tuple[Any, int | None, Any, list[int], list[int]]] = []
        # (firing order, tensor index, gradient): the gradient itself (``fired[reduced:]``) or its 0-d sum
        self.fired: list[tuple[int, int, Any]] = []
        self.reduced = 0
        self.open = open

    def forget_fired(self) -> None:
        self.fired, self.reduced = [], 0

    def reduce_held(self) -> None:
        fired = self.fired
        for k in range(self.reduced, len(fired)):
            order, index, grad = fired[k]
            fired[k] = (order, index, reduce(grad))
        self.reduced = len(fired)

    def call(self, index: int, cache: dict[int, BwCall]) -> BwCall:
        got = cache.get(index)
        if got is None:
            module, parent, root, _, outs = self.calls[index]
            got = BwCall(module=weakref.ref(module), parent=None if parent is None else self.call(parent, cache),
                         root=weakref.ref(root), outs=outs)
            cache[index] = got
        return got


class GradHook:
    """The tensor hook of a recorded activation: keeps its gradient in the backward table as it fires.

    The gradient is held, not reduced: it is read only if the step's gradients turn out non-finite.
    Holding it also keeps autograd from accumulating into it in place. (An object, not a closure: one
    allocation per hooked tensor instead of six.)"""

    __slots__ = ("index", "recorder", "table")

    def __init__(self, recorder: Any, table: BwTable, index: int) -> None:
        self.recorder = recorder
        self.table = table
        self.index = index

    def __call__(self, grad: Any) -> None:
        if grad.requires_grad:  # a double backward's: do not keep its graph
            grad = grad.detach()
        recorder = self.recorder
        self.table.fired.append((next(recorder.fire_order), self.index, grad))
        recorder.held += grad.numel() * grad.element_size()
        if recorder.held > recorder.hold_bytes:
            recorder.reduce_held()


class Blame(NamedTuple):
    """Where a step's non-finite gradient arose, as far as the hooked activation gradients tell.

    ``kind``: "params" (every activation gradient was finite: the ops that use the parameters directly),
    "module" (``calls[0]`` turned a finite output gradient into a bad input gradient; the others use the
    same input), "outside" (the gradient of ``calls[0]``'s output was already bad: code outside every
    module produced it) or "unknown"."""

    kind: str
    what: str                 # "NaN" or "inf"
    calls: tuple[BwCall, ...]


def blame(tables: list[BwTable]) -> Blame:
    """The first hooked tensor, in backward order, whose gradient is non-finite, and the call to blame."""
    fired = sorted(((order, k, index, reduced) for k, table in enumerate(tables)
                    for order, index, reduced in list(table.fired) if reduced is not None),
                   key=lambda item: item[0])
    values = read([item[3] for item in fired]) if fired else []
    first = None
    for (_, k, index, _), v in zip(fired, values, strict=True):
        if not math.isfinite(v):
            first = (tables[k], index, "NaN" if math.isnan(v) else "inf")
            break
    if first is None:
        return Blame("params", "", ())
    fired_ok = {(id(tables[k]), index) for (_, k, index, _), v in zip(fired, values, strict=True) if math.isfinite(v)}
    table, index, what = first
    cache: dict[int, BwCall] = {}
    consumers = [table.call(j, cache) for j, rec in enumerate(table.calls) if index in rec[3]]
    consumers = [c for c in consumers if c.module() is not None
                 and (not c.outs or all((id(table), i) in fired_ok for i in c.outs))]
    innermost = [c for c in consumers if not any(c.is_ancestor_of(o) for o in consumers if o is not c)]
    if innermost:
        return Blame("module", what, tuple(innermost))
    producers = [table.call(j, cache) for j, rec in enumerate(table.calls) if index in rec[4]]
    producers = [c for c in producers if c.module() is not None]
    if producers:
        # the gradient came from code that uses the tensor outside every module that returned it
        return Blame("outside", what, (min(producers, key=BwCall.depth),))
    return Blame("unknown", what, ())
