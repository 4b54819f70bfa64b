"""Frozen output layer: the module that produces the model's output is frozen at its random init.

On sampled grad-enabled forwards, the last module with parameters that ran inside a root model is
noted (O(1) per call); when its output is the model's output, it is the output layer. At the next
``optimizer.step()``, an output layer whose parameters all have ``requires_grad=False`` and still
hold torch's default random initialisation, while other parameters of the model train, is reported.
A frozen *pretrained* head (LoRA / adapters, test-time BatchNorm adaptation) has left the default
init range and stays silent.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers._local import local

FROZEN_OUTPUT = Check(
    code="TP459",
    category=Category.TRAINING,
    severity=Severity.WARNING,
    summary="The layer that produces the model's output is frozen at its random initial weights.",
    doc="""## What it does
At runtime, finds the layer that produces a trained model's output (the last `Linear` / `Conv`
whose output the model returns). When all its parameters have `requires_grad=False`, its weights are
still in torch's default random-initialisation range, and other parameters of the model train, it
reports the layer and how many parameters train instead.

## Why is this bad?
`requires_grad=False` makes autograd skip the layer and every torch 2.13 optimizer leave it
unchanged: the model's predictions go through a fixed random projection, so the loss barely
improves (a transfer-learning script that replaced the head with a new `nn.Linear` and then froze
every parameter but BatchNorm's — PyTorch forum #84911 — stayed at chance accuracy).

## How to fix
Freeze the backbone, not the new head: set `requires_grad=False` before replacing the head, or
re-enable it (`model.fc.requires_grad_(True)`), and give its parameters to the optimizer.""",
)


def _default_init(module: Any) -> bool:
    """Whether a Linear / Conv weight still looks like torch's kaiming-uniform(a=√5) default init."""
    import torch

    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() < 2 or weight.numel() < 16:
        return False
    fan_in, _ = torch.nn.init._calculate_fan_in_and_fan_out(weight)
    if fan_in == 0:
        return False
    bound = 1.0 / math.sqrt(fan_in)
    with torch.no_grad():
        top = local(weight).abs().max().item()
    return 0.5 * bound < top <= bound * (1 + 1e-4)


class FrozenOutput(Watcher):
    """TP459: the output layer is frozen at its random initialisation."""

    name = "frozen_output"
    unsampled_calls = "none"
    checks = (FROZEN_OUTPUT,)
    unsampled_calls = "none"  # the output layer is looked for on sampled steps only

    def __init__(self) -> None:
        super().__init__()
        self._last: tuple[Any, Any] | None = None
        self._heads: dict[int, tuple[weakref.ref, weakref.ref]] = {}   # root id -> (root, head)
        self._checked: set[int] = set()

    def on_forward(self, module: Any, args: tuple, output: Any) -> None:
        session = self.session
        if not session.sampled:
            return
        if session.depth:
            if module._parameters and output is not None:
                self._last = (module, output)
            return
        last, self._last = self._last, None
        if last is None or id(module) in self._checked or id(module) in self._heads:
            return
        import torch

        if not torch.is_grad_enabled():
            return
        head, head_out = last
        out = output
        if not isinstance(out, torch.Tensor):
            out = getattr(out, "logits", None) if not isinstance(out, (tuple, list)) else (out[0] if out else None)
        if out is head_out:
            self._heads[id(module)] = (weakref.ref(module), weakref.ref(head))

    def on_step_pre(self, optimizer: Any) -> None:
        if not self._heads:
            return
        heads, self._heads = self._heads, {}
        held = {id(p) for g in optimizer.param_groups for p in g["params"]}
        for key, (root_ref, head_ref) in heads.items():
            root, head = root_ref(), head_ref()
            self._checked.add(key)
            if root is None or head is None:
                continue
            own = list(head.parameters())
            if not own or any(p.requires_grad for p in own):
                continue
            training = [p for p in root.parameters() if p.requires_grad and (id(p) in held or p.grad is not None)]
            if not training or not _default_init(head):
                continue
            name = self.session.names.module(head)
            count = sum(p.numel() for p in training)
            self.session.report(
                FROZEN_OUTPUT,
                f"`{name}` ({type(head).__name__}) produces the model's output but all its parameters have "
                f"requires_grad=False and still hold their random initial values, while {count:,} other "
                "parameters train: predictions go through a fixed random layer and the model can hardly learn",
                subject=name, key=id(head),
                fix=f"un-freeze the new head (`{name}.requires_grad_(True)`) and give its parameters to the "
                    "optimizer; freeze only the backbone")
