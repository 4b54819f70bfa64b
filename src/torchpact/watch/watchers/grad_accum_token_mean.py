"""Gradient accumulation that averages per-micro-batch means: tokens of small micro-batches weigh more.

The contract: when one optimizer step accumulates the gradients of several ``backward()`` calls, each
of a class-index loss (``F.cross_entropy`` / ``F.nll_loss`` or their modules) averaged over its own
micro-batch (``reduction='mean'``), every target counts the same in the step's gradient — which holds
only when every micro-batch has the same number of counted (not ``ignore_index``) targets. Otherwise
the losses must be re-weighted: ``reduction='sum'`` divided by the step's total count (what
huggingface/transformers#34191 added as ``num_items_in_batch``), or each mean times its own count.

Observed on sampled steps: ``torch.autograd.backward`` (which ``Tensor.backward`` calls) is wrapped to
count the step's backward calls and keep each one's scalar root; the loss calls since the previous
backward are heard through ``_class_losses``. A step is judged when each of its (two or more) backward
calls follows exactly one mean-reduced loss call and each root is the same multiple of its loss (``loss /
accumulation_steps``, a GradScaler's scale): then nothing re-weights the means, and the step's
counts are compared. One ``tolist()`` per judged step.
"""

from __future__ import annotations

from typing import Any

from torchpact.findings import Category, Evidence, Severity
from torchpact.watch.frames import user_location
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers import _class_losses
from torchpact.watch.watchers._patch import Patch, remove_all

WARN_RATIO = 2.0      # largest / smallest count in one step: a token of one micro-batch weighs twice another's
INFO_RATIO = 1.5
WARN_STEPS = 3        # judged steps past WARN_RATIO before a warning ...
WARN_SHARE = 0.25     # ... and at least this share of the judged steps (a short last micro-batch is one step an epoch)
SAME_MULTIPLE = 1e-3  # relative spread of root / loss that still counts as one multiple
MAX_BACKWARDS = 256   # backward calls kept per step

GRAD_ACCUM_TOKEN_MEAN = Check(
    code="TP479",
    category=Category.TRAINING,
    severity=Severity.WARNING,
    severity_note=f"`info` when the counts differ by {INFO_RATIO}x to {WARN_RATIO}x, or by more on fewer than "
                  f"{WARN_STEPS} steps or {WARN_SHARE:.0%} of them (a short last micro-batch)",
    evidence=Evidence.OBSERVED,
    summary="Gradient accumulation sums per-micro-batch mean losses whose counted targets differ: tokens of "
            "small micro-batches weigh more.",
    doc=f"""## What it does
On sampled steps, counts the `backward()` calls between two optimizer steps and the class-index losses
(`F.cross_entropy`, `F.nll_loss`, `nn.CrossEntropyLoss`, `nn.NLLLoss`) each of them back-propagates.
A step is judged when it accumulates two or more `backward()` calls, each of one loss with
`reduction='mean'`, each scaled by the same factor (`loss / accumulation_steps`, a GradScaler's scale):
then every micro-batch contributes its own mean. It compares the number of targets each mean counted
(those that are not `ignore_index`; the summed class weights when `weight=` is given). It reports a
`warning` when the largest count is at least {WARN_RATIO}x the smallest on at least {WARN_STEPS} judged steps
and {WARN_SHARE:.0%} of them, `info` for smaller or rarer differences from {INFO_RATIO}x. Steps whose
losses are re-weighted (`reduction='sum'`, or each mean scaled by its own count) are not judged.

## Why is this bad?
A mean over n tokens gives each token the weight 1/n. Summing K such means (or averaging them) gives
a token of a micro-batch of n_k tokens the weight 1/(K n_k), not 1/N for the N tokens of the step:
with counts differing {WARN_RATIO}x, a token of the short micro-batch pulls on the gradient at least twice as
hard as one of the long micro-batch. The step's gradient is not the gradient of the large batch it is
meant to emulate, the loss depends on how sequences were grouped into micro-batches, and short or
heavily padded sequences dominate training (huggingface/transformers#34191 and #35203,
karpathy/nanochat#59). Nothing raises.

## How to fix
Sum the token losses and divide by the step's total number of counted tokens, computed before the
micro-batches run: `F.cross_entropy(logits, labels, reduction='sum') / num_items_in_batch` (what the
transformers Trainer passes as `num_items_in_batch`), or scale each micro-batch's mean by
`n_k / N`. With micro-batches of equal counts (fixed-length packed sequences), the plain mean is
right.""",
)


class GradAccumTokenMean(Watcher):
    """TP479: accumulated mean losses over unequal numbers of targets."""

    name = "grad_accum_token_mean"
    checks = (GRAD_ACCUM_TOKEN_MEAN,)
    unsampled_calls = "none"
    sampled_only = frozenset({"on_step_end"})

    def __init__(self) -> None:
        super().__init__()
        self._patches: list[Patch] = []
        self._losses: list[tuple[Any, Any]] = []              # (loss, count) since the last backward
        self._backwards: list[tuple[Any, list]] = []          # (root, the losses before it) this step
        self._judged = 0
        self._site: tuple[str | None, str | None, int | None] = (None, None, None)   # the loss: label, path, line
        self._steps: list[tuple[float, int, list[float]]] = []   # (ratio, step, counts) of judged steps
        self._warned = False

    def attach(self, session: Any) -> None:
        super().attach(session)
        import torch

        _class_losses.subscribe(self._wants, self._hear, self._failed)
        self._patches.append(Patch(torch.autograd, "backward", self._wrap_backward, sampled_only=True))

    def _failed(self, exc: Exception, where: str = "a loss call") -> None:
        """Switched off: nothing of it stays behind (the session no longer calls its ``on_close``)."""
        self._teardown()
        self._warned = True
        self.session._failed(self, where, exc)

    def _teardown(self) -> None:
        _class_losses.unsubscribe(self._hear)
        remove_all(self._patches)
        self._losses, self._backwards = [], []

    def _active(self) -> bool:
        session = self.session
        return session.sampled and not self._warned and not session.closed

    _wants = _active

    # ---------------------------------------------------------------- observing
    def _hear(self, call: Any) -> None:
        import torch

        if call.reduction != "mean" or not torch.is_grad_enabled() or not call.class_targets():
            return
        if not getattr(call.loss, "requires_grad", False) or call.loss.dim() != 0:
            return
        with torch.no_grad():
            self._losses.append((call.loss.detach(), _count(call)))
        if self._site[0] is None:
            self._site = (call.label(self.session), *user_location(3))

    def _wrap_backward(self, original: Any) -> Any:
        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if self._active():
                try:
                    self._note_backward(tensors)
                except Exception as exc:  # a watcher bug must never reach the script
                    self._failed(exc, "backward()")
            return original(tensors, *args, **kwargs)
        return backward

    def _note_backward(self, tensors: Any) -> None:
        import torch

        root = tensors
        if isinstance(root, (list, tuple)):
            root = root[0] if len(root) == 1 else None
        losses, self._losses = self._losses, []
        if len(self._backwards) >= MAX_BACKWARDS:
            return
        if isinstance(root, torch.Tensor) and root.dim() == 0 and root.is_floating_point():
            self._backwards.append((root.detach(), losses))
        else:
            self._backwards.append((None, losses))

    # ---------------------------------------------------------------- judging a step
    def on_step_end(self, step: int) -> None:
        try:
            self._end_step(step)
        except Exception as exc:
            self._failed(exc, "on_step_end")

    def _end_step(self, step: int) -> None:
        backwards, self._backwards = self._backwards, []
        self._losses = []
        if self._warned or len(backwards) < 2:
            return
        if any(root is None or len(losses) != 1 for root, losses in backwards):
            return  # not one loss per backward: micro-batches cannot be told apart
        import torch

        with torch.no_grad():
            rows = [torch.stack([root.float().to(loss.device), loss.float(), count.float().to(loss.device)])
                    for root, [(loss, count)] in backwards]
            values = torch.stack(rows).tolist()
        self._judge(step, values)

    def _judge(self, step: int, values: list[list[float]]) -> None:
        import math

        if not all(math.isfinite(v) for row in values for v in row):
            return
        if any(loss == 0.0 or count <= 0.0 for _, loss, count in values):
            return
        multiples = [root / loss for root, loss, _ in values]
        first = multiples[0]
        if first == 0.0 or any(abs(m - first) > SAME_MULTIPLE * abs(first) for m in multiples):
            return  # the means are re-weighted (or something else is added): not this pattern
        counts = [count for _, _, count in values]
        self._judged += 1
        ratio = max(counts) / min(counts)
        if ratio >= INFO_RATIO:
            self._steps.append((ratio, step, counts))
        if self._warning_due():
            self._report(Severity.WARNING)

    def _warning_due(self) -> bool:
        heavy = sum(1 for ratio, _, _ in self._steps if ratio >= WARN_RATIO)
        return heavy >= WARN_STEPS and heavy >= WARN_SHARE * self._judged

    def on_close(self) -> None:
        self._teardown()
        if not self._warned and self._steps:
            self._report(Severity.INFO)

    def _report(self, severity: Severity) -> None:
        self._warned = True
        ratio, step, counts = max(self._steps)
        label, path, line = self._site
        label = label or "the loss"
        heavy = sum(1 for r, _, _ in self._steps if r >= (WARN_RATIO if severity is Severity.WARNING else INFO_RATIO))
        shown = ", ".join(f"{c:g}" for c in counts[:8]) + (", ..." if len(counts) > 8 else "")
        self.session.report(
            GRAD_ACCUM_TOKEN_MEAN,
            f"{label}: {heavy} of the {self._judged} judged optimizer steps accumulate backward() calls of "
            f"mean-reduced losses over different numbers of targets (step {step}: {len(counts)} micro-batches "
            f"counting {shown}): each "
            f"micro-batch is averaged over its own targets, so a target of the smallest weighs {ratio:.1f}x one of "
            "the largest, and the step's gradient is not the mean over its targets",
            severity=severity, subject=label, path=path, line=line, step=step, key="accumulation",
            fix="use reduction='sum' and divide by the step's total count of targets (num_items_in_batch), or "
                "scale each micro-batch's mean loss by its count / the step's count")


def _count(call: Any) -> Any:
    """The denominator of a mean-reduced class-index loss: the targets not ignored (their class weights
    summed when ``weight=`` is given), as a 0-dim tensor (no sync)."""
    import torch

    target = call.target
    valid = target != call.ignore_index
    if call.weight is None:
        return valid.sum()
    classes = call.weight.numel()
    index = torch.where(valid, target, torch.zeros_like(target)).clamp(0, classes - 1)
    return torch.where(valid, call.weight.to(index.device)[index], torch.zeros((), device=index.device)).sum()
