"""Update health: optimizer steps that do not move the weights.

- TP454: on sampled steps, parameters that have a finite, non-zero gradient, sit in a parameter
  group with lr > 0, and yet do not change across ``optimizer.step()`` — twice in a row — although the
  update the optimizer computed for them (``_updates``: from the gradient and the state the step left,
  SGD's momentum buffer, Adam's moments) is at least twice the float spacing of one of their values.
  The update never reaches the weights (a compiled or custom step writing to copies, parameters swapped
  after the optimizer was built). An update below the spacing (a bias in front of BatchNorm, whose
  gradient BatchNorm cancels to rounding noise; a layer behind a zero-initialised gate; a tiny warm-up
  lr) leaves the weights where they are by arithmetic, and is not reported.
- TP455: the learning rate of every group is exactly 0 for many consecutive steps (a schedule bug:
  an integer division in a ``LambdaLR``, a warmup that never starts).

Cost: TP455 reads the groups' ``lr`` floats every step; TP454 only works on sampled steps, on the
first ``SLICE`` elements of each parameter: before the step one flat copy of them per device, after it
the difference, its norms and one read, a few ops for all parameters. Gradients are read only for the
parameters that did not change (rare).
"""

from __future__ import annotations

import math
import weakref
from typing import Any

from torchpact.findings import Category, Evidence, Severity
from torchpact.watch.watcher import Check
from torchpact.watch.watchers import _sites, _updates
from torchpact.watch.watchers._batched import by_device
from torchpact.watch.watchers._local import local, real_view

SLICE = 512             # elements of each parameter compared across a sampled step
CONFIRM = 2             # sampled steps in a row a parameter must stay unchanged
ZERO_LR_STEPS = 20      # consecutive steps with lr == 0 in every group
HIGH_RATIO = 0.1        # |update| / |weight| of one step, for a weight matrix
RATIO_FROM = 10         # an optimizer's steps before this (the first, largest updates; warmup) are not counted
RATIO_STEPS = 5         # consecutive sampled steps above it

STALE_PARAMS = Check(
    code="TP454",
    category=Category.TRAINING,
    severity=Severity.WARNING,
    summary="optimizer.step() does not change parameters although the update it computed for them would show.",
    doc="""## What it does
At runtime, on sampled steps, compares a slice of each parameter just before and just after
`optimizer.step()`. The contract: a step applies the update it computes. When a parameter has a finite,
non-zero gradient, its group's learning rate is above 0, the update the optimizer computed for it —
`lr * grad` for SGD (with its momentum buffer and weight decay), `lr * m̂ / (sqrt(v̂) + eps)` for Adam
(with AdamW's decay), likewise RMSprop and Adagrad, at most `min(lr * |grad|, lr)` for any other
optimizer — is at least twice the float spacing (`torch.finfo(dtype).eps * |p|`) of one of its values,
and yet the parameter is exactly the same after the step — on two sampled steps in a row — it reports
the parameters by name (`conv.bias`), the step and the line where the optimizer was created. An
update smaller than that spacing cannot move the value: a bias in front of BatchNorm trained by SGD
(BatchNorm cancels its gradient to rounding noise), the layers behind a zero-initialised gate during
warm-up, a pretrained attention key bias under Adam's warm-up (softmax ignores it) are not reported.
LBFGS and Rprop, whose steps stop or shrink on their own, are not judged.

## Why is this bad?
torch 2.13's optimizers update every parameter whose `.grad` is not None in place. A parameter that
keeps its value although the update computed for it is large enough to move it means the update is
lost: a compiled or custom step that writes into copies (the torch 2.2 dynamo bug pytorch#115607), or
an optimizer that holds clones of the parameters. The loss still moves (other parameters train), so
the run looks normal.

## How to fix
Check that the optimizer holds the very parameter objects the model uses
(`optimizer.param_groups[i]["params"][j] is model.layer.weight`) and that a custom or compiled `step()`
updates them in place (`p.add_(...)`, not `p = p - ...`).""",
)

ZERO_LR = Check(
    code="TP455",
    category=Category.TRAINING,
    severity=Severity.WARNING,
    summary="The learning rate is exactly 0 in every parameter group for many consecutive steps.",
    doc=f"""## What it does
At runtime, reads the `lr` of every parameter group at each `optimizer.step()`. When it is exactly 0
in every group for {ZERO_LR_STEPS} consecutive steps, it reports the optimizer and the steps.

## Why is this bad?
With lr = 0, torch 2.13's SGD and Adam steps leave the weights unchanged (AdamW's decoupled weight
decay is also multiplied by lr): every step of that stretch is wasted compute. A warmup starting at
0 lasts one step; a long run of zeros is a schedule bug, typically integer division in a
`LambdaLR` factor (`lambda s: s // warmup`), a scheduler stepped with the wrong unit, or a cosine
schedule whose period ended long ago.

## How to fix
Print `scheduler.get_last_lr()` for the first steps and fix the factor (`s / warmup`, not
`s // warmup`), or give the schedule a minimum (`eta_min`, `min_lr`).""",
)


LARGE_UPDATES = Check(
    code="TP463",
    category=Category.TRAINING,
    severity=Severity.INFO, evidence=Evidence.INFERRED,
    summary="Each optimizer step changes a weight matrix by a large fraction of its norm.",
    doc=f"""## What it does
At runtime, on sampled steps, measures the update-to-weight ratio ‖w_after − w_before‖ / ‖w_before‖
of each weight matrix (on a fixed slice of it). When it stays above {HIGH_RATIO:.0%} on
{RATIO_STEPS} sampled steps in a row (from the optimizer's own step {RATIO_FROM} on: an optimizer created late, as in
layer-wise training, gets its first steps too), it reports the parameter, the ratios and the optimizer's
creation line. Biases and normalisation weights (1-D) are left out; small ratios (warmup, decay,
fine-tuning) are never reported.

## Why is this bad?
In a healthy run each step moves a weight matrix by about 0.1% of its norm (1e-3 is the usual rule
of thumb, for SGD and Adam alike). Steps that change a tenth of the weights' norm or more, step after step,
do not refine them, they overwrite them: the loss oscillates or plateaus high, and a learning rate meant for
another model size or optimizer is the usual cause. It is a heuristic, hence `info`.

## How to fix
Lower the learning rate (for this module's parameter group at least) or add warmup; check that the
gradients are not scaled up by mistake (a summed loss, an un-unscaled GradScaler).""",
)


def _lr(group: dict) -> float | None:
    lr = group.get("lr")
    if isinstance(lr, (int, float)):
        return float(lr)
    try:
        return float(lr)  # a tensor lr (capturable / fused optimizers): only read on sampled steps
    except Exception:
        return None


def _head(t: Any) -> Any:
    """The first ``SLICE`` elements of ``t`` (``t`` itself when it has no more: flattening ignores shapes)."""
    if t.numel() <= SLICE:
        return t
    return t.reshape(-1)[:SLICE]  # a view when ``t`` is contiguous


class Lengths:
    """The segment lengths tensor of each group of slices, kept: the same parameters every step, the same
    tensor (one per watcher, so one per session)."""

    def __init__(self) -> None:
        self._tensors: dict[tuple[Any, ...], Any] = {}

    def of(self, part: list[Any]) -> Any:
        import torch

        key = (part[0].device, *(t.numel() for t in part))
        got = self._tensors.get(key)
        if got is None:
            if len(self._tensors) >= 8:  # parameters re-created over and over: keep it small
                self._tensors.clear()
            got = self._tensors[key] = torch.tensor(key[1:], device=part[0].device)
        return got


def _max_abs(t: Any) -> float:
    """max |x| of ``t`` (NaN when it holds one)."""
    import torch

    with torch.no_grad():
        return float(t.abs().max())


def _sum_sq(x: Any, lengths: Any) -> Any:
    """The sum of squares of each segment of ``x``, in float32 at least (half-precision squares overflow)."""
    import torch

    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    return torch.segment_reduce(x * x, "sum", lengths=lengths)


class Snapshot:
    """Copies of parameter slices taken before a step, to compare with the same slices after it: one flat
    vector per device (``flatten_dense_tensors``, one ``cat``), reduced per slice with ``segment_reduce``.
    On a small model an op over a tiny tensor costs more in dispatch than in arithmetic, so a few ops over
    all slices replace a few ops per parameter (which were most of a sampled step's cost on a tiny MLP).
    ``cat`` promotes mixed dtypes exactly (bf16 to float32, float32 to float64): differences keep their
    meaning."""

    def __init__(self, slices: list[Any], lengths: Lengths | None = None) -> None:
        import torch
        from torch._utils import _flatten_dense_tensors

        lengths = lengths or Lengths()
        self.count = len(slices)
        self.shapes = [(t.shape, t.dtype, t.device) for t in slices]
        self.groups = []
        with torch.no_grad():
            for idx in by_device(slices):
                part = [slices[i] for i in idx]
                flat = _flatten_dense_tensors(part)
                if len(part) == 1:  # one tensor is flattened as a view of itself, not copied
                    flat = flat.clone()
                self.groups.append((idx, flat, lengths.of(part)))

    def changes(self, now: list[Any]) -> list[tuple[bool, float]]:
        """For each slice: whether ``now``'s differs from it (``!=`` in the slice's own dtype: inf == inf and
        -0.0 == 0.0 are unchanged, a NaN is always changed) and ‖now − before‖ / ‖before‖. A slice that
        ``now`` lacks (None) or that no longer matches in shape, dtype or device counts as changed, with an
        unknown (NaN) ratio."""
        import torch
        from torch._utils import _flatten_dense_tensors

        same = [n is not None and (n.shape, n.dtype, n.device) == shape
                for n, shape in zip(now, self.shapes, strict=True)]
        columns: list[Any] = [None] * self.count
        with torch.no_grad():
            for idx, before, lengths in self.groups:
                # a slice that cannot be compared is compared with itself, and its result dropped below
                current = _flatten_dense_tensors([now[i] if same[i] else _segment(before, lengths, k)
                                                  for k, i in enumerate(idx)])
                diff = current - before
                stats = torch.stack([torch.segment_reduce(diff.abs(), "max", lengths=lengths),
                                     _sum_sq(diff, lengths), _sum_sq(before, lengths)])
                for i, column in zip(idx, zip(*stats.tolist(), strict=True), strict=True):  # one read per device
                    columns[i] = column
        out = []
        for i, (largest, moved, size) in enumerate(columns):
            if not same[i]:
                out.append((True, math.nan))
                continue
            # inf - inf is NaN although an inf that stayed is unchanged: only a NaN difference is compared in full
            changed = self._differs(now[i], i) if math.isnan(largest) or math.isnan(moved) else largest != 0
            out.append((changed, math.sqrt(moved) / max(math.sqrt(size), 1e-12)))
        return out

    def _differs(self, now: Any, i: int) -> bool:
        for idx, before, lengths in self.groups:
            if i in idx:
                return bool((now.reshape(-1) != _segment(before, lengths, idx.index(i))).any())
        return True


def _segment(flat: Any, lengths: Any, k: int) -> Any:
    """The ``k``-th slice of ``flat`` (rare: a slice that cannot be compared, or an inf that may have stayed)."""
    sizes = lengths.tolist()
    return flat[sum(sizes[:k]):sum(sizes[:k + 1])]


class UpdateHealth(_sites.SiteWatcher):
    """TP454 and TP455: steps that leave the weights where they were."""

    name = "update_health"
    checks = (STALE_PARAMS, ZERO_LR, LARGE_UPDATES)

    def __init__(self) -> None:
        super().__init__()
        self._pending: dict[int, tuple[weakref.ref, list[tuple[weakref.ref, float]], Snapshot | None]] = {}
        self._stale: dict[int, int] = {}          # param id -> sampled steps in a row without change
        self._zero_lr: dict[int, int] = {}        # optimizer id -> consecutive steps with lr == 0
        self._high: dict[int, list[float]] = {}   # param id -> update/weight ratios, consecutive high ones
        self._steps: dict[int, int] = {}          # optimizer id -> steps it made, this one included
        self._largest: dict[int, float] = {}      # param id -> the largest update its last lost step computed
        self._lengths = Lengths()

    def on_step_pre(self, optimizer: Any) -> None:
        self._check_zero_lr(optimizer)
        if self.session.sampled:
            self._snapshot(optimizer)

    def on_step(self, optimizer: Any) -> None:
        self._steps[id(optimizer)] = self._steps.get(id(optimizer), 0) + 1
        entry = self._pending.pop(id(optimizer), None)
        if entry is None or entry[0]() is not optimizer or entry[2] is None:
            return
        self._compare(optimizer, entry[1], entry[2])

    # ------------------------------------------------------------------ TP455
    def _check_zero_lr(self, optimizer: Any) -> None:
        zero = True
        for group in optimizer.param_groups:
            lr = group.get("lr")
            if not isinstance(lr, (int, float)):
                if not self.session.sampled:
                    return  # a tensor lr is read on sampled steps only (no sync per step)
                lr = _lr(group)
            if lr is None or lr != 0:
                zero = False
                break
        key = id(optimizer)
        if not zero:
            self._zero_lr.pop(key, None)
            return
        count = self._zero_lr.get(key, 0) + 1
        self._zero_lr[key] = count
        if count == ZERO_LR_STEPS:
            path, line = self.creation_site(optimizer)
            first = self.session.step - count + 1
            self.session.report(
                ZERO_LR,
                f"the learning rate of the {self.site_label(optimizer)} has been exactly 0 in every parameter group "
                f"for {count} consecutive steps (since step {first}): these steps do not train at all",
                subject=f"{type(optimizer).__name__}.lr", path=path, line=line, key=("zero_lr", key),
                fix="check the schedule's factor (`step / warmup`, not `step // warmup`) and print "
                    "scheduler.get_last_lr() for the first steps")

    # ------------------------------------------------------------------ TP454
    def _snapshot(self, optimizer: Any) -> None:
        chosen: list[tuple[weakref.ref, float]] = []
        slices: list[Any] = []
        for group in optimizer.param_groups:
            lr = _lr(group)
            if not lr or lr <= 0:
                continue
            for p in group["params"]:
                g = p.grad
                if g is None or not p.requires_grad or g.is_sparse:
                    continue
                w = local(p)
                if w.numel() == 0:
                    continue
                chosen.append((weakref.ref(p), lr))
                slices.append(_head(real_view(w)))  # complex: its real and imaginary parts, compared as such
        if chosen:
            self._pending[id(optimizer)] = (weakref.ref(optimizer), chosen, Snapshot(slices, self._lengths))

    def _compare(self, optimizer: Any, pending: list[tuple[weakref.ref, float]], before: Snapshot) -> None:
        params = [ref() for ref, _ in pending]
        changes = before.changes([_head(real_view(local(p))) if p is not None else None for p in params])
        alive = [(p, lr, change) for p, (_, lr), change in zip(params, pending, changes, strict=True)
                 if p is not None]
        if not alive:
            return
        follow_up = self._check_ratios(optimizer, [(p, ratio) for p, _, (_, ratio) in alive if p.dim() >= 2])
        stale = []
        for p, lr, (changed, _) in alive:
            if changed:
                self._stale.pop(id(p), None)
                continue
            # Rare (the weights were the same after the step): only now are the gradient and the optimizer's
            # state looked at. The step changed neither the gradient nor the weights: what it computed from
            # them is the update it should have applied.
            g = p.grad
            gmax = _max_abs(_head(local(g))) if g is not None and not g.is_sparse else 0.0
            if not math.isfinite(gmax) or gmax == 0:
                self._stale.pop(id(p), None)
                continue
            n = min(SLICE, real_view(local(p)).numel())
            update = _updates.expected_update(optimizer, self._group_of(optimizer, p), p, n, lr)
            if update is None:
                continue
            visible, largest = _updates.shows(update, p, n)
            if not visible:
                continue  # below the float spacing of the weights: too small to move them, not lost
            self._largest[id(p)] = largest
            count = self._stale.get(id(p), 0) + 1
            self._stale[id(p)] = count
            follow_up = follow_up or count < CONFIRM
            if count >= CONFIRM:
                stale.append((p, lr))
        if stale:
            self._report_stale(optimizer, stale)
        if follow_up:
            self.session.sample_next()  # confirm on the next step, not `every` steps later

    @staticmethod
    def _group_of(optimizer: Any, p: Any) -> dict:
        for group in optimizer.param_groups:
            if any(q is p for q in group["params"]):
                return group
        return {}

    def _check_ratios(self, optimizer: Any, ratios: list[tuple[Any, float]]) -> bool:
        """TP463: weight matrices whose every sampled update is a large part of the weight itself. Returns
        whether a streak of large updates is under way and not reported yet."""
        if self._steps.get(id(optimizer), 0) <= RATIO_FROM:  # its own steps: not the primary optimizer's
            # not counted yet; sampled on while they are this large, to count them once they do
            return any(ratio > HIGH_RATIO and math.isfinite(ratio) for _, ratio in ratios)
        follow_up = False
        names = self.session.names
        for p, ratio in ratios:
            key = id(p)
            if ratio <= HIGH_RATIO or not math.isfinite(ratio):
                self._high.pop(key, None)
                continue
            seen = self._high.setdefault(key, [])
            seen.append(ratio)
            follow_up = follow_up or len(seen) < RATIO_STEPS
            if len(seen) != RATIO_STEPS:
                continue
            name = names.param(p)
            module = name.rsplit(".", 1)[0] if "." in name else name
            path, line = self.creation_site(optimizer)
            self.session.report(
                LARGE_UPDATES,
                f"each of the last {RATIO_STEPS} sampled steps of the {self.site_label(optimizer)} changed `{name}` by "
                f"{min(seen):.0%}–{max(seen):.0%} of its norm (a healthy update is around 0.1%): the weights are "
                "rewritten rather than refined, usually a learning rate far too high for this module",
                subject=module, path=path, line=line, key=("ratio", module),
                fix="lower the learning rate (or this module's param group lr), add warmup, and check that "
                    "gradients are not scaled up (loss summed instead of averaged, a GradScaler not unscaled)")
        return follow_up

    def _report_stale(self, optimizer: Any, stale: list[tuple[Any, float]]) -> None:
        names = [self.session.names.param(p) for p, _ in stale]
        lrs = sorted({lr for _, lr in stale})
        largest = max(self._largest.get(id(p), 0.0) for p, _ in stale)
        listing = ", ".join(f"`{n}`" for n in names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        path, line = self.creation_site(optimizer)
        self.session.report(
            STALE_PARAMS,
            f"{len(names)} parameter(s) ({listing}) had a finite, non-zero gradient and lr={lrs[0]:g} but did not "
            f"change across step() of the {self.site_label(optimizer)}, on {CONFIRM} sampled steps in a row "
            "(last: step "
            f"{self.session.step}), although the update it computed for them (up to {largest:.2g}) is larger than "
            "the float spacing of their values: the update never reaches these weights",
            subject=names[0], path=path, line=line, key=("stale", id(optimizer)),
            fix="make sure the optimizer holds the model's own parameter objects "
                "(optimizer.param_groups[i]['params'][j] is model.layer.weight) and that its step() updates them "
                "in place (p.add_(...), not p = p - ...)")
