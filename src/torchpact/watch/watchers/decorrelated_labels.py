"""Inputs and labels decorrelated (shuffled apart): the loss stays at the labels' entropy while the model can fit.

The contract: when labels are independent of the inputs, no model does better than predicting the
labels' frequencies, whose loss is the entropy H of the labels' distribution (ln C for balanced
classes): by Gibbs' inequality the expected loss of any prediction on a batch it was not trained on is
at least H. The loss of a training step is computed before that step's update, on a batch the model
has (in its first epoch) not trained on: its mean over steps estimates that held-out loss. So a
classifier whose loss (``F.cross_entropy`` / ``F.nll_loss`` or their modules) is not below H by more
than ``STANDARD_ERRORS`` standard errors from step ``WINDOW_FROM`` to ``DECIDE_AT`` — nor over the
second half of that window — has learned nothing that carries from one batch to the next: either
nothing can learn (a frozen head, a zero lr), or the inputs do not predict the labels (two different
shuffles, one for the features and one for the labels). A probe tells these apart, once, off the
training path (``watch/offpath``): a copy of the model and its optimizers trains on one batch of the
run; when that batch's loss falls by a quarter, the model and optimizer can learn, and the loss of
another batch, looked at on the way, says whether what it learns carries over.

Cost: the first grad-enabled mean-reduced loss of every step is kept as a detached 0-d tensor (no
sync) until the decision; the labels are counted on sampled steps; from ``ARM_FROM`` on, while the
loss still sits at H, the two latest sampled batches are cloned; the probe (at most ``PROBE_STEPS``
steps of one batch on the copy) runs at most once, only when the loss sat at H up to ``DECIDE_AT``.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from torchpact.findings import Category, Evidence, Severity
from torchpact.watch import offpath
from torchpact.watch.frames import user_location
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers import _class_losses

DECIDE_AT = 100       # steps: TP462 waits 200 for ln(C) alone; a probe confirms here, so half that
WINDOW_FROM = 20      # the loss of the first steps is at chance for every classifier: not counted
ARM_FROM = 40         # from here, while the loss sits at H, sampled batches are kept for the probe
MIN_VALUES = 10
STANDARD_ERRORS = 1.5  # the window's mean (and its second half's) is at most this many standard errors below H
MIN_ENTROPY = 0.1     # nats: labels nearly all of one class say nothing
PROBE_STEPS = 100     # the most steps the copy trains on one batch
PROBE_CHECK = 10      # ... looking at its loss every this many steps
FITS = 0.75           # the copy learns the batch: its loss falls by a quarter
TRANSFER = 0.02       # another batch improves by at most this share of the fitted batch's improvement

DECORRELATED = Check(
    code="TP568",
    category=Category.DATA,
    severity=Severity.WARNING,
    severity_note="`info` when the loss stays at the labels' entropy but the probe could not run (the model "
                  "could not be copied or its call replayed)",
    evidence=Evidence.INFERRED,
    summary="The loss stays at the labels' entropy while a copy of the model fits a batch: inputs and labels "
            "do not go together (shuffled apart?).",
    doc=f"""## What it does
Keeps the training loss of `F.cross_entropy` / `F.nll_loss` (and their modules; mean-reduced, class
targets, no class weights or label smoothing) and counts the labels. When, from step {WINDOW_FROM} to step
{DECIDE_AT}, the loss stays at the entropy H of the labels' distribution — the loss of predicting the
class frequencies whatever the input, ln C for balanced classes: its mean, and the mean of the
window's second half, are not below H by more than {STANDARD_ERRORS} standard errors — it probes once, off
the training path: a copy of the model and of its optimizers (same class, hyper-parameters and state)
trains for up to {PROBE_STEPS} steps on one batch of the run. It reports a `warning` when that batch's loss
falls by {1 - FITS:.0%} while the loss of another batch of the run never improves by more than {TRANSFER:.0%}
of that on the way: the model and its optimizer can learn, but nothing learned from one batch holds on
the next. When the probe cannot run (a model too large to copy, a distributed job, a compiled model, a
call it could not replay) it reports the plateau as `info`. A copy that cannot learn the batch either
(a frozen head, an lr of 0) is not this bug and is left to the other checks (TP462, TP455).

A loss sits at H only while each batch is new to the model: a dataset small enough to be memorised
over the first epochs (a fixed wrong pairing seen many times) brings the training loss below H and is
not reported. The other way round, a task whose labels do follow from the inputs but that the model
cannot begin to learn within these steps looks the same to the check: k-bit parity for an MLP stays at
ln 2 for hundreds of steps, and fitting one batch of it carries nothing to the next either.

Training is not changed: the copy has its own parameters and optimizer state, no hooks, and runs with
torch's random generators forked; the original model and optimizers are never touched.

## Why is this bad?
A model whose labels do not follow from its inputs cannot do better than predict the label
frequencies: the loss stays at H however long it trains and the model learns nothing useful, with no
error anywhere. The usual cause is shuffling features and labels with two different permutations
(`X = X[np.random.permutation(n)]`, then `y = y[np.random.permutation(n)]`), shuffling one of two
parallel lists or datasets but not the other, or zipping two `DataLoader(shuffle=True)`s
(mlcommons/GaNDLF#870).

## How to fix
Shuffle one index and apply it to both: `perm = torch.randperm(n); X, y = X[perm], y[perm]`, or keep
inputs and labels in one `Dataset` and let the `DataLoader` shuffle it. Check a few samples by eye
after the data pipeline.""",
)


class _Batch:
    """One batch of the run, cloned: the model's call and the loss's target and options."""

    __slots__ = ("model", "args", "kwargs", "path", "shape", "function", "target", "ignore_index")

    def __init__(self, model: Any, args: tuple, kwargs: dict, path: tuple, shape: Any, call: Any) -> None:
        self.model = model
        self.args = _cloned(args)
        self.kwargs = _cloned(kwargs)
        self.path = path
        self.shape = shape
        self.function = call.function
        self.target = call.target.detach().clone()
        self.ignore_index = call.ignore_index

    def loss(self, model: Any) -> Any:
        out = model(*self.args, **self.kwargs)
        for key in self.path:
            out = out[key]
        if self.shape is not None:
            out = out.reshape(self.shape)
        return _class_losses.original(self.function)(out, self.target, ignore_index=self.ignore_index)


class DecorrelatedLabels(Watcher):
    """TP568: the loss pinned at the labels' entropy while the model could fit."""

    name = "decorrelated_labels"
    checks = (DECORRELATED,)
    unsampled_calls = "none"
    sampled_only = frozenset({"on_step_end"})

    def __init__(self) -> None:
        super().__init__()
        self._values: list[tuple[int, Any]] = []
        self._last_step = -1
        self._counts: Any = None
        self._classes = 0
        self._site: tuple[str | None, int | None] = (None, None)
        self._armed = False
        self._root: tuple[Any, tuple, dict | None, Any] | None = None
        self._batches: list[_Batch] = []
        self._decided = False

    def attach(self, session: Any) -> None:
        super().attach(session)
        _class_losses.subscribe(self._wants, self._hear, self._failed, unsampled=self._undecided)

    def on_close(self) -> None:
        _class_losses.unsubscribe(self._hear)
        self._forget()

    def _failed(self, exc: Exception, where: str = "a loss call") -> None:
        """Switched off: nothing of it stays behind (the session no longer calls its ``on_close``)."""
        _class_losses.unsubscribe(self._hear)
        self._forget()
        self.session._failed(self, where, exc)

    def _forget(self) -> None:
        self._decided = True
        self._values, self._batches, self._root, self._counts = [], [], None, None

    # ---------------------------------------------------------------- observing
    def on_forward(self, module: Any, args: tuple, output: Any) -> None:
        if self._armed and self.session.depth == 0 and output is not None:
            try:
                self._root = (module, args, _call_kwargs(module), output)
            except Exception as exc:
                self._failed(exc, "on_forward")

    def _undecided(self) -> bool:
        return not self._decided

    def _wants(self) -> bool:
        return not self._decided and self.session.step != self._last_step and not self.session.closed

    def _hear(self, call: Any) -> None:
        import torch

        if (call.reduction != "mean" or call.weight is not None or call.label_smoothing
                or not torch.is_grad_enabled() or not call.class_targets() or call.loss.dim() != 0
                or not getattr(call.loss, "requires_grad", False)):
            return
        session = self.session
        self._last_step = session.step
        self._values.append((session.step, call.loss.detach()))
        if not session.sampled:
            return
        classes = call.classes()
        if self._classes and classes != self._classes:
            self._forget()  # not one classification problem
            return
        with torch.no_grad():
            target = call.target.detach()
            labels = target[target != call.ignore_index].reshape(-1)
            # (the loss has checked that every label is a class: the clamp only keeps bincount's length)
            counts = torch.bincount(labels.clamp(0, classes - 1), minlength=classes)
            self._counts = counts if self._counts is None else self._counts + counts.to(self._counts.device)
        if not self._classes:
            self._classes = classes
            self._site = user_location(3)
        if self._armed and self._root is not None:
            self._keep(call)

    def _keep(self, call: Any) -> None:
        module, args, kwargs, output = self._root
        self._root = None
        found = _find(output, call.input)
        if kwargs is None or found is None:
            return
        self._batches = [*self._batches[-1:], _Batch(module, args, kwargs, *found, call)]

    # ---------------------------------------------------------------- deciding
    def on_step_end(self, step: int) -> None:
        self._root = None
        try:
            self._end_step(step)
        except Exception as exc:
            self._failed(exc, "on_step_end")

    def _end_step(self, step: int) -> None:
        if self._decided or step + 1 < ARM_FROM:
            return
        plateau = self._plateau()
        if plateau is None:
            if step + 1 >= DECIDE_AT or self._enough_values():
                self._forget()  # it learns (or this is not a classification the check can read)
            return
        self._armed = True
        if step + 1 < DECIDE_AT:
            return
        batches = self._batches
        self._forget()
        self._decide(plateau, batches)

    def _enough_values(self) -> bool:
        return sum(1 for s, _ in self._values if s >= WINDOW_FROM) >= MIN_VALUES

    def _plateau(self) -> dict | None:
        """The window's numbers when its loss sits at the labels' entropy; else None."""
        import torch

        window = [(s, v) for s, v in self._values if s >= WINDOW_FROM]
        if len(window) < MIN_VALUES or self._counts is None:
            return None
        losses = torch.stack([v.float().to(window[0][1].device) for _, v in window]).tolist()
        counts = self._counts.tolist()
        total = sum(counts)
        entropy = -sum(c / total * math.log(c / total) for c in counts if c) if total else 0.0
        if entropy < MIN_ENTROPY or not all(math.isfinite(v) for v in losses):
            return None
        if not (_not_below(losses, entropy) and _not_below(losses[len(losses) // 2:], entropy)):
            return None
        return {"entropy": entropy, "chance": math.log(self._classes), "first": window[0][0],
                "last": window[-1][0], "mean": sum(losses) / len(losses), "classes": self._classes}

    def _decide(self, plateau: dict, batches: list[_Batch]) -> None:
        if len(batches) < 2 or batches[0].model is not batches[1].model:
            self._report(plateau, None, "its batches could not be replayed (the loss's input is not the model's "
                                        "output, or the call could not be read)")
            return
        try:
            probe = self._probe(batches[1], batches[0])
        except offpath.Refused as refused:
            self._report(plateau, None, str(refused))
            return
        except Exception as exc:  # the user's model failed on its own batch, replayed: no conclusion
            self._report(plateau, None, f"replaying a batch failed ({exc.__class__.__name__}: {exc})")
            return
        fitted, held_out = probe["fitted"], probe["held_out"]
        fit_gain = fitted[0] - fitted[1]
        if fitted[1] > FITS * fitted[0] or held_out[0] - held_out[1] > TRANSFER * fit_gain:
            return  # the copy cannot fit (not this bug), or what it learns carries over (learning, slowly)
        self._report(plateau, probe, None)

    def _probe(self, fit: _Batch, other: _Batch) -> dict:
        import torch

        model = fit.model
        params = {id(p) for p in model.parameters()}
        optimizers = [o for o in self.session.optimizers()
                      if any(id(p) in params for group in o.param_groups for p in group["params"])]
        if not optimizers:
            raise offpath.Refused("no optimizer holds the model's parameters")
        copy, copies = offpath.copy_model(model, optimizers)

        def loss_of(batch: _Batch) -> float:  # the same dropout masks at every look
            offpath.reseed(copy, 0)
            with torch.no_grad():
                return float(batch.loss(copy))

        with offpath.unobserved(self.session), offpath.forked_rng(model), torch.enable_grad():
            fitted0 = fitted = loss_of(fit)
            held0 = held = loss_of(other)
            steps = 0
            for steps in range(1, PROBE_STEPS + 1):
                for p in copy.parameters():
                    p.grad = None
                fit.loss(copy).backward()
                for opt in copies:
                    offpath.step(opt)
                if steps % PROBE_CHECK == 0:
                    fitted, held = loss_of(fit), min(held, loss_of(other))
                    if fitted <= FITS * fitted0:
                        break
        return {"fitted": (fitted0, fitted), "held_out": (held0, held), "steps": steps}

    def _report(self, plateau: dict, probe: dict | None, refused: str | None) -> None:
        h, c = plateau["entropy"], plateau["classes"]
        stays = (f"the loss stayed at the entropy of the labels from step {plateau['first']} to {plateau['last']} "
                 f"(mean {plateau['mean']:.3f}; H(labels) = {h:.3f}, ln({c}) = {plateau['chance']:.3f}): the model "
                 "predicts the class frequencies and nothing from its inputs")
        if probe is None:
            message, severity = f"{stays}; the probe that tells why did not run: {refused}", Severity.INFO
        else:
            (a0, a1), (b0, b1) = probe["fitted"], probe["held_out"]
            message = (f"{stays}, yet a copy of the model and its optimizer fits one batch of the run ({a0:.3f} -> "
                       f"{a1:.3f} in {probe['steps']} steps) while another batch goes {b0:.3f} -> {b1:.3f}: what the "
                       "model learns from a batch does not hold on the next, so the labels do not follow from the "
                       "inputs — are inputs and labels shuffled separately?")
            severity = Severity.WARNING
        path, line = self._site
        self.session.report(
            DECORRELATED, message, severity=severity, subject="labels", path=path, line=line, key="labels",
            fix="shuffle one index and apply it to inputs and labels alike (perm = torch.randperm(n); "
                "x, y = x[perm], y[perm]), or keep them in one Dataset and let the DataLoader shuffle")


def _not_below(losses: list[float], entropy: float) -> bool:
    """Whether the mean of ``losses`` is not below ``entropy`` by more than ``STANDARD_ERRORS`` of its standard
    errors: what the loss of batches the model has not trained on yet does when the labels are independent
    of the inputs (their expectation is then at least H, by Gibbs' inequality)."""
    n = len(losses)
    mean = sum(losses) / n
    spread = math.sqrt(sum((v - mean) ** 2 for v in losses) / (n - 1)) if n > 1 else 0.0
    return mean >= entropy - STANDARD_ERRORS * spread / math.sqrt(n) - 1e-6


def _cloned(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_cloned(v) for v in value)
    if isinstance(value, dict):
        return {k: _cloned(v) for k, v in value.items()}
    return value


def _call_kwargs(module: Any) -> dict | None:
    """The keyword arguments of ``module``'s running call, read from torch's ``_call_impl``; None if unseen."""
    frame = sys._getframe(1)
    for _ in range(8):
        frame = frame.f_back
        if frame is None:
            return None
        local = frame.f_locals
        if local.get("self") is module and "kwargs" in local and frame.f_code.co_name in ("inner", "_call_impl"):
            kwargs = local["kwargs"]
            return dict(kwargs) if isinstance(kwargs, dict) else None
    return None


def _find(output: Any, x: Any) -> tuple[tuple, Any] | None:
    """Where the loss's input ``x`` sits in the model's output: (the keys down to it, the shape to reshape it
    to when it is a reshape of it); None when it is neither the output, a part of it, nor its reshape."""
    import torch

    leaves: list[tuple[tuple, Any]] = [((), output)]
    if isinstance(output, (list, tuple)):
        leaves += [((i,), v) for i, v in enumerate(output)]
    elif isinstance(output, dict):
        leaves += [((k,), v) for k, v in output.items()]
    for path, t in leaves:
        if t is x:
            return path, None
    for path, t in leaves:
        if (isinstance(t, torch.Tensor) and t.numel() == x.numel() and t.data_ptr() == x.data_ptr()
                and t.is_contiguous() and x.is_contiguous() and t.dtype == x.dtype):
            return path, tuple(x.shape)
    return None
