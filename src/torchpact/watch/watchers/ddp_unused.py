"""Parameters that get no gradient under DistributedDataParallel, named at the step they miss it.

With ``find_unused_parameters=False`` (the default) and no ``static_graph``, DDP's reducer waits for
every parameter's gradient before it all-reduces a bucket. When a backward leaves a parameter
without a gradient, its bucket is never reduced (on torch 2.13 a small model has one bucket: no
gradient is averaged at that step) and the next DDP forward raises "Expected to have finished
reduction in the prior iteration". The reducer knows which parameters are missing:
``reducer._check_reducer_finalized()`` raises the same error, listing their indices, without
changing any state. It is asked after the gradients are complete (the optimizer's step pre-hook)
and before each synchronised DDP forward, so the finding comes before DDP's error, with names.

With ``find_unused_parameters=True`` the reducer's per-iteration map of used parameters tells
whether the flag is needed at all, or whether ``static_graph=True`` would do (advice, at the end).

Cost: one C++ call per DDP per step; the names of the modules called since the last DDP forward
(a set insert per module call, only once a DDP has been seen); the used map on sampled steps only.
"""

from __future__ import annotations

import re
import weakref
from collections import Counter
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.facts import GradientsNotReduced
from torchpact.watch.frames import user_location
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers.ddp_common import is_ddp, listing, model_key, plural, reducer_parameters

MIN_CHECKED_STEPS = 10

UNUSED_UNDER_DDP = Check(
    code="TP604",
    category=Category.DISTRIBUTED,
    severity=Severity.ERROR,
    severity_note=("`info` when `find_unused_parameters=True` is set but not needed (every parameter got a gradient, "
                   "or the same ones never do, which `static_graph=True` handles): a cost per step, not a failure"),
    summary="Parameters got no gradient under DDP: named at the step they miss it, with the DDP option that fits.",
    doc="""## What it does
Under `DistributedDataParallel` without `find_unused_parameters` / `static_graph`, asks DDP's reducer
after every backward whether each parameter's gradient arrived (the reducer's own bookkeeping: no
extra graph traversal). When some did not, it names them and their modules at that step, says
whether each module was called in that forward at all, and which DDP option fits. With
`find_unused_parameters=True` it reads the reducer's map of used parameters on sampled steps and,
after enough steps, says (`info`) when the flag was never needed or when `static_graph=True` would do.

## Why is this bad?
DDP all-reduces gradients bucket by bucket, as soon as every parameter of a bucket has its gradient.
A parameter that gets none (an unused submodule, a branch not taken, an output left out of the loss)
keeps its bucket from ever being reduced: on torch 2.13 the gradients of that bucket are not averaged
at that step (a small model has a single bucket, so no gradient is) and the ranks' replicas drift
apart; then the next forward raises "Expected to have finished reduction in the prior iteration
before starting a new one", which lists parameter indices, not names.
`find_unused_parameters=True` makes DDP traverse the autograd graph after every forward and
all-reduce a map of the used parameters (2 `gloo:all_reduce` per step instead of 1); measured here
it costs 0-25% per step, not the several-fold slowdown often claimed. `static_graph=True` handles a
set of unused parameters that is the same at every step with one all-reduce per step.

## How to fix
Parameters that are never used (the module is never called in forward): delete them, or freeze them
(`requires_grad_(False)`) before wrapping, or pass `static_graph=True`. Parameters whose use depends
on the batch (a branch taken sometimes): pass `find_unused_parameters=True`. An output of the model
left out of the loss: add it to the loss (or `0 * out.sum()`), or stop computing it.""",
)

_INDICES = re.compile(r"did not receive grad for rank \d+:\s*([\d ,]+)")


class _Ddp:
    """One DDP wrapper seen in forward."""

    def __init__(self, ref: weakref.ref, params: list[tuple[str, Any]], owners: dict[int, Any]) -> None:
        self.ref = ref
        self.params = params                     # reducer order
        self.owners = owners                     # id(param) -> module holding it
        self.armed = False                       # a synchronised forward with grad enabled since the last check
        self.site: tuple[str | None, int | None] = (None, None)
        self.checked = 0                         # sampled steps with the used map read (find_unused_parameters)
        self.unused_sets: Counter = Counter()
        self.unreduced = False                   # GradientsNotReduced published


class DdpUnusedWatcher(Watcher):
    """TP604 at runtime: DDP parameters without a gradient, named, with the option that fits."""

    name = "ddp_unused"
    needs_process_group = True
    unsampled_calls = "roots"   # "all" once a DDP model ran
    checks = (UNUSED_UNDER_DDP,)

    def __init__(self) -> None:
        super().__init__()
        self._ddps: dict[int, _Ddp] = {}
        self._called: set[int] = set()   # modules called since the last synchronised DDP forward

    # ------------------------------------------------------------------ callbacks
    def on_forward_pre(self, module: Any, args: tuple) -> None:
        if not is_ddp(module):
            if self._ddps:
                self._called.add(id(module))
            return
        import torch

        rec = self._ddps.get(id(module))
        if rec is None or rec.ref() is not module:
            rec = self._ddps[id(module)] = self._index(module)
            self.unsampled_calls = "all"  # every module called between DDP forwards matters now
        if not torch.is_grad_enabled() or not module.require_backward_grad_sync:
            self._called.add(id(module))
            return
        if self._watched(module):
            self._check(rec, module, before_forward=True)
        self._called = {id(module)}
        rec.armed = True
        if rec.site[0] is None or self.session.sampled:
            rec.site = user_location(2)

    def on_step_pre(self, optimizer: Any) -> None:
        for rec in list(self._ddps.values()):
            ddp = rec.ref()
            if ddp is None or not rec.armed:
                continue
            rec.armed = False
            if self._watched(ddp):
                self._check(rec, ddp, before_forward=False)
            elif self.session.sampled and ddp.find_unused_parameters and not ddp.static_graph:
                self._read_used_map(rec, ddp)

    def on_close(self) -> None:
        for rec in self._ddps.values():
            ddp = rec.ref()
            if ddp is None or rec.checked < MIN_CHECKED_STEPS or not ddp.find_unused_parameters or ddp.static_graph:
                continue
            if len(rec.unused_sets) != 1:
                continue  # the unused set changes from step to step: the flag is needed
            [unused] = rec.unused_sets
            if not unused:
                self.session.report(
                    UNUSED_UNDER_DDP,
                    f"`find_unused_parameters=True`, but every parameter got a gradient at all {rec.checked} checked "
                    "steps: DDP still traverses the autograd graph after every forward and all-reduces a map of the "
                    "used parameters before the gradients (2 all-reduces per step instead of 1)",
                    subject="find_unused_parameters", severity=Severity.INFO, path=rec.site[0], line=rec.site[1],
                    fix="drop `find_unused_parameters=True` (keep it only if some batches leave parameters unused)")
            else:
                names = [rec.params[i][0] for i in sorted(unused) if i < len(rec.params)]
                self.session.report(
                    UNUSED_UNDER_DDP,
                    f"`find_unused_parameters=True`, and the same {plural(len(names), 'parameter')} ({listing(names)}) "
                    f"got no gradient at all {rec.checked} checked steps: a fixed unused set is what "
                    "`static_graph=True` handles, with one all-reduce per step instead of 2 and no graph traversal",
                    subject="find_unused_parameters", severity=Severity.INFO, path=rec.site[0], line=rec.site[1],
                    fix="pass `static_graph=True` instead, or freeze (`requires_grad_(False)`) / remove the unused "
                        "parameters before wrapping", parameters=names)

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _watched(ddp: Any) -> bool:
        """DDP raises for missing gradients only without find_unused_parameters and static_graph."""
        return not ddp.find_unused_parameters and not ddp.static_graph

    def _index(self, ddp: Any) -> _Ddp:
        params = reducer_parameters(ddp)
        owners = {}
        for mod in ddp.module.modules():
            for p in mod._parameters.values():
                if p is not None:
                    owners.setdefault(id(p), mod)
        names = self.session.names
        named = [(names.param(p) if names.has_param(p) else n, p) for n, p in params]
        return _Ddp(ref=weakref.ref(ddp), params=named, owners=owners)

    def _read_used_map(self, rec: _Ddp, ddp: Any) -> None:
        try:
            used = ddp.reducer._get_local_used_map().tolist()
        except Exception:  # a reducer without the map (python reducer, compiled DDP)
            return
        if len(used) != len(rec.params):
            return
        rec.checked += 1
        rec.unused_sets[frozenset(i for i, u in enumerate(used) if not u)] += 1

    def _missing(self, ddp: Any) -> list[int] | None:
        """Reducer indices of the parameters whose gradient did not arrive; None when all did."""
        try:
            ddp.reducer._check_reducer_finalized()
        except RuntimeError as exc:
            text = str(exc)
            if "Expected to have finished reduction" not in text:
                return None
            found = _INDICES.search(text)
            if found:
                return [int(i) for i in re.findall(r"\d+", found.group(1))]
            return []
        except AttributeError:  # no C++ reducer (python reducer, torch.compile'd DDP)
            return None
        return None

    def _check(self, rec: _Ddp, ddp: Any, *, before_forward: bool) -> None:
        missing = self._missing(ddp)
        if missing is None:
            return
        params = [rec.params[i] for i in missing if 0 <= i < len(rec.params)]
        if not params:  # indices not printed: fall back to the parameters without a .grad
            params = [(n, p) for n, p in rec.params if p.grad is None]
        names = [n for n, _ in params]
        modules: dict[str, tuple[Any, list[str]]] = {}
        for name, p in params:
            owner = rec.owners.get(id(p))
            mod_name = name.rsplit(".", 1)[0] if "." in name else type(ddp.module).__name__
            modules.setdefault(mod_name, (owner, []))[1].append(name.rsplit(".", 1)[-1])
        never_called = [m for m, (owner, _) in modules.items() if owner is not None and id(owner) not in self._called]
        cut = [m for m in modules if m not in never_called]
        parts = []
        if never_called:
            parts.append(f"{listing(never_called)} {'was' if len(never_called) == 1 else 'were'} never called in "
                         "this forward")
        if cut:
            parts.append(f"{listing(cut)} {'was' if len(cut) == 1 else 'were'} called but did not reach the loss "
                         "(an output left out of the loss, a .detach(), or a branch that skips them)")
        step = self.session.step
        when = ("before this forward" if before_forward else "in this step's backward")
        message = (f"DDP: {plural(len(names), 'parameter')} got no gradient {when} (step {step}): {listing(names, 6)}; "
                   + "; ".join(parts) + ". DDP never all-reduced the gradient bucket holding them, so this step's "
                   "gradients in that bucket were not averaged across ranks, and the next forward raises \"Expected "
                   "to have finished reduction in the prior iteration\"")
        if cut and not never_called:
            fix = ("if which parameters are unused depends on the batch, pass `find_unused_parameters=True` to DDP "
                   "(a graph traversal and one more all-reduce per step: 0-25% here); if the same ones are always "
                   "unused, `static_graph=True` (no extra cost), or add their output to the loss")
        else:
            fix = ("if they are unused at every step, delete them or freeze them (`requires_grad_(False)`) before "
                   "wrapping in DDP, or pass `static_graph=True` (no extra cost per step); if their use depends on "
                   "the batch, pass `find_unused_parameters=True` (a graph traversal and one more all-reduce per "
                   "step: 0-25% here)")
        if not rec.unreduced:
            rec.unreduced = True
            self.session.facts.publish(GradientsNotReduced(rec.ref))
        path, line = rec.site
        self.session.report(UNUSED_UNDER_DDP, message, subject=", ".join(modules), fix=fix, path=path, line=line,
                            key=("unused", id(ddp)), parameters=names, modules=sorted(modules),
                            never_called=never_called, ddp_model=model_key(ddp))
