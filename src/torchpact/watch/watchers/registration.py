"""Registration: submodules a model calls but never registered (kept in a plain list or dict).

A module stored as ``self.heads = [nn.Linear(...)]`` runs in ``forward`` but is not a submodule:
its parameters are not in ``model.parameters()`` — so an optimizer built from that never trains
them — nor in the ``state_dict``, nor moved by ``model.to(device)``. The watcher notes such
modules when they are first called inside a registered model (reading the caller's attributes to
name the container), and reports them at the next ``optimizer.step()`` when their trainable
parameters are in no optimizer. Deliberately hidden modules (a frozen teacher kept in a list to
keep it out of the state_dict, or parameters handed to an optimizer explicitly) stay silent.
"""

from __future__ import annotations

import weakref
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.frames import user_location
from torchpact.watch.watcher import Check, Watcher

UNREGISTERED = Check(
    code="TP403",
    category=Category.TRAINING,
    severity=Severity.ERROR,
    summary="A model calls submodules kept in a plain list/dict: their parameters are never trained or saved.",
    doc="""## What it does
At run time: finds modules that run inside a model's `forward` but are not registered submodules of
it (kept in a plain Python `list`/`dict`/`tuple` attribute), whose trainable parameters belong to no
optimizer when the optimizer steps. It names the container (`Classifier.heads[0]`).

## Why is this bad?
`nn.Module.__setattr__` registers only `nn.Module`, `nn.Parameter` and the `nn.ModuleList` /
`nn.ModuleDict` / `nn.ParameterList` containers. A layer inside a plain list runs, but
`model.parameters()` does not yield its parameters: the optimizer built from it never updates them
(they stay at their random initial values), `state_dict()` does not save them and `model.to(device)`
does not move them.

## How to fix
Use `nn.ModuleList([...])` / `nn.ModuleDict({...})` (`torchpact lint --fix` rewrites the list).""",
)


def _container_name(parent: Any, module: Any) -> str | None:
    """``heads[0]`` / ``heads['a']`` when ``parent`` holds ``module`` in a plain container attribute."""
    for attr, value in list(getattr(parent, "__dict__", {}).items()):
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if item is module:
                    return f"{attr}[{i}]"
        elif isinstance(value, dict):
            for key, item in value.items():
                if item is module:
                    return f"{attr}[{key!r}]"
    return None


class Registration(Watcher):
    """TP403 at run time: unregistered submodules whose parameters no optimizer trains."""

    name = "registration"
    unsampled_calls = "none"
    checks = (UNREGISTERED,)

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[int] = set()
        self._candidates: list[tuple[weakref.ref, str, tuple[str | None, int | None]]] = []

    def on_forward_pre(self, module: Any, args: tuple) -> None:
        if id(module) in self._seen:
            return
        self._seen.add(id(module))
        session = self.session
        stack = session.module_stack()
        if len(stack) < 2 or session.names.has_module(module):
            return
        parent = stack[-2]
        if not session.names.has_module(parent):
            return  # report the outermost unregistered module only
        if not any(p.requires_grad for p in module.parameters()):
            return  # frozen helpers (a teacher kept out of the state_dict) are fine
        where = _container_name(parent, module)
        if where is None:
            return  # passed in as an argument or held elsewhere: not this bug
        label = f"{session.names.module(parent)}.{where}"  # the root's class name, or its qualified name
        self._candidates.append((weakref.ref(module), label, user_location(2)))

    def on_step_pre(self, optimizer: Any) -> None:
        if not self._candidates:
            return
        held = {id(p) for opt in [*self.session.optimizers(), optimizer] for g in opt.param_groups for p in g["params"]}
        candidates, self._candidates = self._candidates, []
        for ref, label, site in candidates:
            module = ref()
            if module is None:
                continue
            params = [p for p in module.parameters() if p.requires_grad]
            if any(id(p) in held for p in params):
                continue  # handed to an optimizer explicitly: trained, if not saved
            count = sum(p.numel() for p in params)
            self.session.report(
                UNREGISTERED,
                f"`{label}` ({type(module).__name__}, {count:,} trainable parameters) runs in forward but is "
                "kept in a plain container, so it is not a registered submodule: no optimizer trains its "
                "parameters, state_dict() does not save them and .to(device) does not move them",
                subject=label, fix="wrap the container in nn.ModuleList(...) / nn.ModuleDict(...)",
                path=site[0], line=site[1])
