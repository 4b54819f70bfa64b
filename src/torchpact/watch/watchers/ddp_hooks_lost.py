"""DDP's gradient hooks no longer fire: the parameters' data were replaced after wrapping.

DDP registers its all-reduce hooks on each parameter's gradient accumulator (``AccumulateGrad``
node) when it is built. Converting the wrapped model to another device or dtype and back
(``ddp_model.cpu(); ddp_model.cuda(rank)``, pytorch#104336, or ``.double().float()``) replaces the
parameters' data, and torch 2.13 then gives each parameter a *new* accumulator: backward() no longer
reaches DDP's hooks, gradients stay local and the replicas train apart — while dtype and device
end up exactly as before, so nothing looks wrong.

``DistributedDataParallel.__init__`` is wrapped to keep the accumulators of a few parameters; on
sampled steps they are compared with the current ones (a throw-away ``view_as`` per probe).
``Module._apply`` is wrapped to note the user's line of each conversion of a wrapped model.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.frames import user_location
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers._patch import Patch, remove_all

PROBES = 4

HOOKS_LOST = Check(
    code="TP657",
    category=Category.DISTRIBUTED,
    severity=Severity.ERROR,
    summary="A DDP model's parameters got new gradient accumulators after wrapping: gradients are not all-reduced.",
    doc="""## What it does
At runtime, remembers the gradient accumulators DDP hooked when a `DistributedDataParallel` model
was built, and checks on sampled steps that the parameters still use them. When they do not, it
reports the model and the lines that converted it after wrapping (`.cpu()`, `.cuda()`, `.to(...)`,
`.double()`, `.float()`, ...).

## Why is this bad?
DDP all-reduces gradients from hooks on each parameter's `AccumulateGrad` node. Moving or
converting the wrapped model replaces the parameters' data; in torch 2.13 a parameter whose data
changed dtype or device gets a new accumulator, and a round trip (`ddp_model.cpu();
ddp_model.cuda(rank)` — pytorch#104336 — or `.double().float()`) ends on the original device and
dtype, so it looks harmless. backward() then never reaches DDP's hooks: every rank steps with its
own local gradients and the replicas silently drift apart.

## How to fix
Move and convert the model before wrapping it (`model.to(device, dtype)`, then `DDP(model)`); to
offload it, re-wrap it in a new `DDP(...)` after moving it back.""",
)


def _accumulator(p: Any) -> Any:
    import torch

    with torch.enable_grad():
        fn = p.view_as(p).grad_fn
    return fn.next_functions[0][0] if fn is not None and fn.next_functions else None


class DdpHooksLost(Watcher):
    """TP657: DDP-hooked gradient accumulators replaced after wrapping."""

    name = "ddp_hooks_lost"
    needs_process_group = True
    checks = (HOOKS_LOST,)
    sampled_only = frozenset({"on_step_pre"})

    def __init__(self) -> None:
        super().__init__()
        self._patches: list[Patch] = []
        self._models: list[tuple[weakref.ref, list[tuple[weakref.ref, Any]], list[tuple[str | None, int | None]]]] = []

    def attach(self, session: Any) -> None:
        super().attach(session)
        import torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel

        self._patches.append(Patch(DistributedDataParallel, "__init__", self._wrap_init))
        self._patches.append(Patch(nn.Module, "_apply", self._wrap_apply))

    def on_close(self) -> None:
        remove_all(self._patches)

    def _wrap_init(self, original: Any) -> Any:
        def __init__(ddp: Any, *args: Any, **kwargs: Any) -> None:
            original(ddp, *args, **kwargs)
            if self.session.closed:
                return
            probes = []
            for p in ddp.module.parameters():
                if p.requires_grad:
                    node = _accumulator(p)
                    if node is not None:
                        probes.append((weakref.ref(p), node))
                if len(probes) >= PROBES:
                    break
            if probes:
                self._models.append((weakref.ref(ddp), probes, []))
        return __init__

    def _wrap_apply(self, original: Any) -> Any:
        def _apply(module: Any, *args: Any, **kwargs: Any) -> Any:
            if self._models:
                for ref, _, sites in self._models:
                    ddp = ref()
                    if ddp is not None and (module is ddp or module is ddp.module):
                        site = user_location(2)
                        if site[0] and site not in sites:
                            sites.append(site)
                        break
            return original(module, *args, **kwargs)
        return _apply

    def on_step_pre(self, optimizer: Any) -> None:
        if not self._models or not self.session.sampled:
            return
        for entry in list(self._models):
            ref, probes, sites = entry
            ddp = ref()
            if ddp is None:
                self._models.remove(entry)
                continue
            if all(_accumulator(p) is node for p, node in ((r(), n) for r, n in probes) if p is not None):
                continue
            self._models.remove(entry)
            where = ", ".join(f"{os.path.basename(path)}:{line}" for path, line in sites[:3])
            by = f" by the conversion at {where}" if where else ""
            name = self.session.names.module(ddp)
            self.session.report(
                HOOKS_LOST,
                f"the parameters of the DDP model `{name}` were converted after wrapping{by}: they now have new "
                "gradient accumulators that DDP's all-reduce hooks are not attached to, so every rank steps with "
                "its own local gradients and the replicas drift apart",
                subject=name, path=sites[0][0] if sites else None, line=sites[0][1] if sites else None,
                key=id(ddp), fix="move / convert the model before wrapping it in DDP, or wrap it again afterwards")
