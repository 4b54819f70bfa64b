"""FSDP2: an optimizer built before ``fully_shard`` holds parameters the model no longer uses.

``torch.distributed.fsdp.fully_shard(module)`` replaces each of the module's parameters by a new
``nn.Parameter`` wrapping a sharded ``DTensor`` (and swaps the module's class for ``FSDP<Class>``).
An optimizer created before that still holds the old tensors: they never get a gradient and
``step()`` does nothing. At an optimizer's first ``step()`` its parameters are compared with the
current parameters of the models the script called (once per optimizer).
"""

from __future__ import annotations

import weakref
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.watcher import Check
from torchpact.watch.watchers import _sites

REPLACED = Check(
    code="TP656",
    category=Category.DISTRIBUTED,
    severity=Severity.ERROR,
    summary="The optimizer was created before fully_shard(): it holds parameters FSDP2 replaced.",
    doc="""## What it does
At runtime, at each optimizer's first `step()`, looks for parameters it holds that are no longer
parameters of the model because `torch.distributed.fsdp.fully_shard` (FSDP2) replaced them with
sharded `DTensor` parameters. It reports the sharded modules, how many of the optimizer's
parameters are stale and the line that created the optimizer.

## Why is this bad?
In torch 2.13 `fully_shard` registers new `nn.Parameter` objects (DTensor shards) on every module it
wraps; the tensors the optimizer was given before are no longer part of the model. backward()
fills the gradients of the new parameters only, the optimizer sees `.grad` None on all of its own
and skips them: the model never trains, on every rank, and nothing raises.

## How to fix
Call `fully_shard(...)` on the sub-modules and the root first, then create the optimizer from
`model.parameters()`.""",
)


def replaced_by_fully_shard(session: Any, optimizer: Any) -> tuple[list[Any], list[Any], list[Any]]:
    """The modules fully_shard() wrapped, the optimizer's parameters, and those of them it replaced."""
    roots = session.names.root_modules()
    sharded = [m for root in roots for m in root.modules() if type(m).__name__.startswith("FSDP")]
    if not sharded:
        return [], [], []
    current = {id(p) for root in roots for p in root.parameters()}
    held = [p for g in optimizer.param_groups for p in g["params"]]
    return sharded, held, [p for p in held if id(p) not in current and p.grad is None]


class FsdpReplacedParams(_sites.SiteWatcher):
    """TP656: optimizer parameters replaced by FSDP2's ``fully_shard``."""

    name = "fsdp_replaced_params"
    needs_process_group = True
    checks = (REPLACED,)

    def __init__(self) -> None:
        super().__init__()
        self._seen: "weakref.WeakSet[Any]" = weakref.WeakSet()

    def on_step_pre(self, optimizer: Any) -> None:
        if optimizer in self._seen:
            return
        self._seen.add(optimizer)
        sharded, held, stale = replaced_by_fully_shard(self.session, optimizer)
        if not stale:
            return
        names = []
        for m in sharded:
            name = self.session.names.module(m)
            if name not in names:
                names.append(name)
        listing = ", ".join(f"`{n}`" for n in names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        path, line = self.creation_site(optimizer)
        self.session.report(
            REPLACED,
            f"{len(stale)} of the {len(held)} parameters the {self.site_label(optimizer)} holds were replaced by "
            f"fully_shard() ({listing} now hold sharded DTensor parameters): the optimizer was created before "
            "fully_shard, its parameters never get a gradient and step() updates nothing",
            subject=names[0] if names else None, path=path, line=line, key=id(optimizer),
            fix="apply fully_shard(...) to the sub-modules and the root first, then create the optimizer "
                "from model.parameters()")
