"""Step coverage: a run that trained without ``optimizer.step()`` is told that the step checks did not run.

Most runtime checks hang off torch's optimizer step hooks (gradient health, optimizer use, NaN in
updates, the sampled checks' schedule). A script that updates its parameters by hand
(``p.data.add_(-lr * p.grad)``, ``p -= lr * p.grad`` under ``no_grad``) or through a library that
never calls a ``torch.optim`` optimizer gives those hooks nothing, and "No findings" would read as a
clean bill of health. At the end of the run, when no optimizer stepped but the models the script
called have trainable parameters holding gradients (a backward ran), this says so, as info.
"""

from __future__ import annotations

from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.frames import user_location
from torchpact.watch.watcher import Check, Watcher

NO_OPTIMIZER_STEP = Check(
    code="TP490",
    category=Category.TRAINING,
    severity=Severity.INFO,
    summary="The script trained without a torch.optim optimizer step: the step-based runtime checks did not run.",
    doc="""## What it does
At the end of a `torchpact run`, reports (as info) a run in which the models the script called have
trainable parameters with gradients — a backward ran — but no `torch.optim` optimizer ever
stepped: the parameters were updated by hand (`p.data.add_(-lr * p.grad)`, `p -= lr * p.grad`
under `torch.no_grad()`) or not at all.

## Why is this bad?
It is not a bug by itself. But torchpact's training checks run in torch's optimizer step hooks
(`register_optimizer_step_pre_hook` / `_post_hook`): gradient health (TP353, TP354), gradients
never zeroed or missing (TP401, TP404), parameters outside the optimizer (TP451), NaN in an update
(TP352), and the schedule of sampled checks. Without a step those checks did not run, so a report
without findings says little about the training itself.

## How to fix
Nothing to fix if updating by hand is intended. To have the training checked, use an optimizer from
`torch.optim` (`torch.optim.SGD(model.parameters(), lr=lr)` does what `p.data.add_(-lr * p.grad)`
does), or a library that calls one.""",
)


class StepCoverage(Watcher):
    """TP490: a backward ran through a model the script called, but no optimizer stepped."""

    name = "step_coverage"
    checks = (NO_OPTIMIZER_STEP,)
    unsampled_calls = "roots"   # "none" once a backward was seen or an optimizer stepped

    def __init__(self) -> None:
        super().__init__()
        self._site: tuple[str | None, int | None] = (None, None)
        self._trained: tuple[str, int] | None = None     # (model, trainable parameters) a backward reached

    def on_forward_pre(self, module: Any, args: tuple) -> None:
        if self._site[0] is None and self.session.depth == 1:  # the line that first called a model
            self._site = user_location(2)

    def on_forward(self, module: Any, args: tuple, output: Any) -> None:
        if self._trained is not None or self.session.depth != 0 or self.session.step > 0:
            if self.session.step > 0:  # an optimizer stepped: nothing left to report
                self.unsampled_calls = "none"
            return
        tensor = _graph_output(output)
        if tensor is not None:
            # The models are gone by the end of the run: note at the backward that one reached this model.
            count = sum(1 for p in module.parameters() if p.requires_grad)
            name = type(module).__name__
            tensor.register_hook(lambda grad: self._backward(name, count))

    def _backward(self, name: str, count: int) -> None:
        if self._trained is None and count:
            self._trained = (name, count)
            self.unsampled_calls = "none"

    def on_close(self) -> None:
        session = self.session
        if session.step > 0 or session.optimizers() or self._trained is None:
            return  # stepped, or no backward ran through a model (inference only)
        model, count = self._trained
        session.report(
            NO_OPTIMIZER_STEP,
            f"`{model}` got gradients ({count} trainable parameters) but no torch.optim optimizer stepped during "
            "the run: the parameters were updated by hand or not at all, so the checks that run at optimizer steps "
            "(gradient health, optimizer use, NaN in updates) did not run — no findings from them means nothing",
            subject=model, path=self._site[0], line=self._site[1],
            fix="nothing to fix if the manual update is intended; to have the training checked, use a torch.optim "
                "optimizer (torch.optim.SGD(model.parameters(), lr=lr) does what p.data.add_(-lr * p.grad) does)")


def _graph_output(output: Any) -> Any:
    """The first tensor of a model's output that a backward can reach, or None."""
    import torch

    items = output.values() if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else (output,)
    for item in items:
        if isinstance(item, torch.Tensor) and item.requires_grad:
            return item
    return None
