"""Loss at chance level: a classification loss that stays at about ln(C) for the first steps.

``F.cross_entropy`` (which ``nn.CrossEntropyLoss`` and most model heads call) is wrapped: on sampled
steps before ``CHECK_AT``, the first grad-enabled call of the step keeps its detached mean loss and
the number of classes (O(1), no sync). At step ``CHECK_AT`` the values are read once; when every one
of them is within ``TOLERANCE`` of ln(C) — the loss of a uniform guess — an info finding gives the
numbers. Soft (probability) targets and unreduced losses are left out.
"""

from __future__ import annotations

import math
from typing import Any

from torchpact.findings import Category, Evidence, Severity
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers._patch import Patch, remove_all

CHECK_AT = 200      # steps
TOLERANCE = 0.05    # relative distance to ln(C)
MIN_VALUES = 10

CHANCE_LOSS = Check(
    code="TP462",
    category=Category.TRAINING,
    severity=Severity.INFO, evidence=Evidence.INFERRED,
    summary=f"The classification loss stays at chance level, ln(C), for the first {CHECK_AT} steps.",
    doc=f"""## What it does
At runtime, records the cross-entropy loss of the training steps (sampled) and the number of
classes C. When, over the first {CHECK_AT} steps, every recorded value is within
{TOLERANCE:.0%} of ln(C) — the loss of predicting the uniform distribution — it reports the numbers.

## Why is this bad?
A model that predicts uniformly has cross-entropy exactly ln(C). Staying there for hundreds of
steps means the model has learned nothing yet, not even the class frequencies: the usual causes
are a frozen or detached output layer, a learning rate of 0 or far too small, labels shuffled
independently of the inputs, or inputs that carry no signal (all zeros after a wrong
normalisation). It is a heuristic — a very hard task can stay near chance for a while — hence
`info`.

## How to fix
Check that the head trains (it is in the optimizer, `requires_grad=True`), that the loss falls on a
single small batch when trained repeatedly (overfitting one batch must work), and that inputs and
labels still match after the data pipeline.""",
)


class ChanceLoss(Watcher):
    """TP462: cross-entropy that stays at ln(C)."""

    name = "chance_loss"
    checks = (CHANCE_LOSS,)

    def __init__(self) -> None:
        super().__init__()
        self._patches: list[Patch] = []
        self._values: list[Any] = []
        self._classes: set[int] = set()
        self._last_step = -1
        self._done = False

    def attach(self, session: Any) -> None:
        super().attach(session)
        import torch.nn.functional as F

        self._patches.append(Patch(F, "cross_entropy", self._wrap, sampled_only=True))

    def on_close(self) -> None:
        remove_all(self._patches)

    def _wrap(self, original: Any) -> Any:
        def cross_entropy(input: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
            loss = original(input, target, *args, **kwargs)
            session = self.session
            if self._done or not session.sampled or session.step == self._last_step or session.closed:
                return loss
            self._record(input, target, loss, args, kwargs)
            return loss
        return cross_entropy

    def _record(self, input: Any, target: Any, loss: Any, args: tuple, kwargs: dict) -> None:
        import torch

        reduction = args[3] if len(args) > 3 else kwargs.get("reduction", "mean")
        if (reduction != "mean" or not torch.is_grad_enabled() or not getattr(input, "requires_grad", False)
                or target.is_floating_point() or input.dim() < 1 or loss.dim() != 0):
            return
        classes = input.shape[1] if input.dim() >= 2 else input.shape[0]
        if classes < 2:
            return
        self._last_step = self.session.step
        self._values.append(loss.detach())
        self._classes.add(int(classes))

    def on_step_end(self, step: int) -> None:
        if self._done or step + 1 < CHECK_AT:
            return
        self._done = True
        values, self._values = self._values, []
        if len(values) < MIN_VALUES or len(self._classes) != 1:
            return
        import torch

        numbers = torch.stack(values).float().tolist()
        classes = next(iter(self._classes))
        chance = math.log(classes)
        if all(abs(v - chance) <= TOLERANCE * chance for v in numbers):
            self.session.report(
                CHANCE_LOSS,
                f"the cross-entropy loss stayed at chance level for the first {CHECK_AT} steps: ln({classes}) = "
                f"{chance:.3f}, recorded values {min(numbers):.3f}–{max(numbers):.3f} (last {numbers[-1]:.3f}): "
                "the model predicts no better than a uniform guess",
                subject="loss", key="chance",
                fix="check that the output layer trains, that the lr is not 0 or tiny, and that one small batch "
                    "can be overfit; then that labels still match their inputs")
