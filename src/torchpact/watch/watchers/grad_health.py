"""Per-layer gradient norms over steps: exploding (TP353) and vanishing (TP354) gradients.

A layer is the module that directly holds parameters (``encoder.layers.0.linear1``); its gradient
norm is the norm over those parameters. On sampled steps, in the optimizer's step pre-hook (the
gradients about to be applied: after accumulation, clipping and GradScaler's unscale), one batched
``torch._foreach_norm`` per device and one ``tolist()`` give every layer's norm. The series is kept
as plain data (``GradHealth.series``: layer -> [(step, norm)]) for reports to plot.

Thresholds are relative, never absolute: a gradient's scale depends on the loss, the batch size and
the parametrisation, none of which torchpact knows. They were set from the per-layer norms of
healthy runs (a GPT with AdamW and clipping, a ResNet with SGD and a step schedule, a plain CNN, an
8-layer ReLU MLP, a 2-layer LSTM, a pre-norm transformer, LoRA adapters with zero-initialised B):

- Exploding (TP353): a layer's norm compared with the median of its own previous checked steps. In
  those healthy runs the largest jump was 6x (warm-up, a loss spike, LoRA's B leaving zero), and
  the largest spread over a whole run 72x, slowly. A jump of ``JUMP`` (100x) that holds on two
  consecutive checked steps, or ``GROWTH_STEPS`` consecutive checked steps each growing and
  ``JUMP``x in total, is reported — when the norm is also above ``ABOVE_PEAK`` times the largest
  the layer ever had: gradients that collapse early (a policy gradient while every action earns the
  same reward) and then recover come back to their earlier level, which is no explosion. Comparing layers
  with each other does not show explosion: weight gradients of a linear chain are equal across depth even
  when every one of them blows up, and output heads are routinely 400x the median layer.
- Vanishing (TP354): a layer's gradient compared with the median layer's, both per element (RMS)
  and in total (norm), so that sparse embeddings (low RMS, normal norm) and small LayerNorm / bias
  layers (low norm, normal RMS) are not mistaken for vanishing. Healthy runs stayed above 0.02x
  on the larger of the two; a 12-layer sigmoid MLP's first layer is at 3e-6x. Below ``VANISH``
  (1e-3x) on ``VANISH_STEPS`` consecutive checked steps, without growing, is reported: as a
  warning with SGD-like optimizers, and as info with adaptive ones (Adam, RMSprop...), which
  normalise each parameter's update and so still train such a layer, unless its gradients approach
  their ``eps``. Layers with exactly zero gradients are TP252's (gradient_flow), and layers of under
  ``MIN_NUMEL`` elements (gates, temperatures, ReZero scalars) are not judged.
- Gated layers: a layer whose gradient is exactly zero on a checked step while other layers' are not sits
  behind a multiplicative zero (a zero-initialised gate: timm's ``zero_init_last`` residual BatchNorm,
  LoRA's B, ReZero's alpha). While the gate opens its gradient grows from zero — neither vanishing nor
  exploding — so such a layer is judged by neither check, and left out of the medians, until its gradient
  reaches ``AWAKE`` of the median layer's (healthy layers stay above 0.02x); its history then starts
  afresh. A gate that never opens leaves the layer at exactly zero: TP252's.
"""

from __future__ import annotations

import itertools
import math
import weakref
from typing import Any, NamedTuple

from torchpact.findings import Category, Evidence, Severity
from torchpact.median import median
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers._batched import grad_norms
from torchpact.watch.watchers._local import dense_grads

JUMP = 100.0            # exploding: x the median of the layer's previous checked norms
RISING = 10.0           # x that median: the next step is checked too (healthy runs stayed under 6x)
BASELINE_MIN = 4        # previous checked steps needed before a jump can be judged
GROWTH_STEPS = 5        # consecutive growing checked steps that also count as exploding
ABOVE_PEAK = 2.0        # ... and only above this many times the largest norm the layer had before
VANISH = 1e-3           # vanishing: x the median layer, in both RMS and norm
VANISH_STEPS = 5        # consecutive checked steps below VANISH
MIN_NUMEL = 100         # smaller layers are not judged for vanishing
AWAKE = 0.02            # a gated layer is judged again from this fraction of the median layer on
MAX_POINTS = 512        # per layer in `series`; older points are thinned out beyond that

EXPLODING = Check(
    code="TP353",
    category=Category.NUMERICS,
    severity=Severity.WARNING, evidence=Evidence.INFERRED,
    summary="A layer's gradient norm jumped by orders of magnitude over its own recent history and stayed there.",
    doc="""## What it does
On sampled steps, reads every layer's gradient norm in the optimizer's step pre-hook (the gradients
about to be applied, after clipping and GradScaler's unscale; one batched `torch._foreach_norm` and
one host read per step) and keeps the series per layer. It reports a layer whose norm is 100x or
more the median of its own previous checked steps on two consecutive checked steps, or that grew
at each of five consecutive checked steps by 100x in total, and is more than twice the largest norm
the layer had before (gradients that recover from an early collapse return to their earlier level:
that is not an explosion). A layer behind a zero-initialised gate (its gradient exactly zero on an
earlier checked step: a residual block's zero-initialised last BatchNorm, LoRA's B) grows from zero
while the gate opens; it is judged once its gradient has reached 2% of the median layer's, from then
on. The message gives the series.

Thresholds are relative to the layer's own past: in healthy runs (transformers with warm-up and
clipping, ResNets with step schedules, LSTMs, LoRA adapters leaving their zero init) the largest
jump over the recent median was 6x. A gradient clipped to `max_norm` cannot explode this way, so
clipped training stays silent.

## Why is this bad?
An update proportional to a gradient 100x its usual size moves the weights 100x further than the
steps before: the loss spikes, and a few such steps later the weights or activations overflow and
the run turns NaN. It is the classic failure of RNNs and of a learning rate too high for the model.

## How to fix
Clip gradients before `optimizer.step()` (`torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)`),
lower the learning rate or add a warm-up, and check the layer named (a recurrent weight, an
attention logit without scaling, a normalisation-free deep stack).""",
)

VANISHING = Check(
    code="TP354",
    category=Category.NUMERICS,
    severity=Severity.WARNING, evidence=Evidence.INFERRED,
    severity_note=("`info` when the optimizer rescales each update (Adam-like) and its eps does not dominate: "
                   "the layer still moves"),
    summary="A layer's gradients are a thousandth or less of the median layer's, step after step.",
    doc="""## What it does
On sampled steps, compares every layer's gradient with the median layer's, both per element (RMS)
and in total (norm), and reports the layers below 1/1000 of the median on both, on five consecutive
checked steps, without growing. Healthy runs stay above 1/50 (sparse embeddings have a low RMS but a
normal norm; LayerNorm and bias layers a low norm but a normal RMS). Layers whose gradient is exactly
zero (TP252) and layers of under 100 elements are left out, and so are layers behind a zero-initialised
gate while it opens (timm's zero-initialised last BatchNorm of a residual block, LoRA's B, ReZero): their
gradient was exactly zero on an earlier checked step, and they are judged again once it reaches 2% of
the median layer's. With an SGD-like optimizer it is a
warning; with an adaptive one (Adam, AdamW, RMSprop, Adagrad), which divides each update by the
gradient's own running scale, it is info, unless the gradients are so small that `eps` dominates.

## Why is this bad?
With SGD, a layer's update is proportional to its gradient: a layer with 1000x smaller gradients
learns 1000x slower, so the early layers of a deep network stay at their initialisation. This is
what a deep stack of sigmoid/tanh layers without normalisation or residual connections does: each
saturating activation multiplies the backward signal by at most 0.25 (sigmoid).

## How to fix
Use ReLU/GELU instead of sigmoid/tanh between layers, add normalisation (BatchNorm, LayerNorm) or
residual connections, and initialise with `nn.init.kaiming_normal_` / `xavier_uniform_` for the
activation used. An adaptive optimizer (AdamW) also compensates for the scale.""",
)

_ADAPTIVE = ("Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta", "SparseAdam",
             "Adafactor", "LAMB", "Lamb", "Lion")


class _Layer:
    """One layer of one optimizer: its parameters' positions in the optimizer and its history."""

    def __init__(self, name: str, numel: int) -> None:
        self.name = name
        self.numel = numel
        self.key = ""                        # its name in `series`
        self.history: list[float] = []       # norms at checked steps (last 32)
        self.steps: list[int] = []
        self.low_streak = 0
        self.low_start = 0.0
        self.low_ratio = 1.0
        self.high_streak = 0
        self.dropped_peak = 0.0              # the largest norm that left `history`
        self.gated = False                   # behind a gate still opening (see the module doc)

    def peak_before(self, index: int) -> float:
        """The largest finite norm this layer had before ``history[index]``."""
        return max([self.dropped_peak, *(x for x in self.history[:index] if math.isfinite(x))])


class _Layout(NamedTuple):
    """How one optimizer's parameters group into layers, rebuilt when its parameters change."""

    signature: tuple
    index: list[int]          # parameter position -> layer position
    layers: list[_Layer]
    eps: float | None
    adaptive: bool


def _fmt(x: float) -> str:
    return "nan" if math.isnan(x) else f"{x:.2g}"


class GradHealth(Watcher):
    """Exploding (TP353) and vanishing (TP354) gradients per layer, with the per-layer series as data."""

    name = "grad_health"
    checks = (EXPLODING, VANISHING)
    sampled_only = frozenset({"on_step_pre"})

    def __init__(self) -> None:
        super().__init__()
        self.series: dict[str, list[tuple[int, float]]] = {}
        self._series_owner: dict[str, int] = {}  # series key -> position of the optimizer that feeds it
        self._optimizer_order: dict[int, int] = {}
        self._layouts: dict[int, tuple[weakref.ref, _Layout]] = {}
        self._reported: set[tuple[int, str]] = set()


    def data(self) -> dict[str, Any]:
        """The per-layer gradient-norm series, for the report's heatmap."""
        return {"series": {layer: list(points) for layer, points in self.series.items()}} if self.series else {}
    def on_step_pre(self, optimizer: Any) -> None:
        if not self.session.sampled:
            return
        import torch

        params, grads = dense_grads(optimizer)
        if not params:
            return  # (sharded DTensor gradients: a local norm is not the layer's norm)
        layout = self._layout(optimizer, params)
        found_inf = getattr(optimizer, "found_inf", None)
        grad_scale = getattr(optimizer, "grad_scale", None)
        with torch.no_grad():
            norms = grad_norms(grads, self.session.cache)
            extra = []
            if found_inf is not None and grad_scale is not None:  # a GradScaler-aware optimizer, still scaled
                extra = [found_inf.float().reshape(()).to(norms.device),
                         grad_scale.float().reshape(()).to(norms.device)]
            values = torch.cat([norms, torch.stack(extra)]).tolist() if extra else norms.tolist()
        if extra:
            inf, scale = values[-2], values[-1]
            if inf or not scale:
                return  # this step is skipped by the optimizer itself
            values = [v / scale for v in values[:-2]]
        sq = [0.0] * len(layout.layers)
        for i, v in zip(layout.index, values, strict=True):
            sq[i] += v * v
        step = self.session.step
        self._gate(layout, sq)
        for layer, s in zip(layout.layers, sq, strict=True):
            norm = math.sqrt(s)
            self._record(layer, step, norm)
        self._check_vanishing(optimizer, layout, sq)
        rising = self._check_exploding(optimizer, layout)
        if rising or ((id(optimizer), VANISHING.code) not in self._reported
                      and any(0 < layer.low_streak < VANISH_STEPS for layer in layout.layers)):
            self.session.sample_next()  # a streak has begun: judge it on consecutive steps

    # ------------------------------------------------------------------ data
    def _layout(self, optimizer: Any, params: list[Any]) -> _Layout:
        signature = tuple(id(p) for p in params)
        entry = self._layouts.get(id(optimizer))
        if entry is not None and entry[0]() is optimizer and entry[1].signature == signature:
            return entry[1]
        names = self.session.names
        old = {layer.name: layer for layer in entry[1].layers} if entry is not None else {}
        layers: dict[str, _Layer] = {}
        position: dict[str, int] = {}
        index = []
        for p in params:
            pname = names.param(p)
            lname = pname.rsplit(".", 1)[0] if "." in pname else pname
            layer = layers.get(lname)
            if layer is None:
                layer = layers[lname] = old.get(lname) or _Layer(name=lname, numel=0)
                layer.numel = 0
                layer.key = layer.key or self._series_key(optimizer, lname)
                position[lname] = len(position)
            layer.numel += p.numel()
            index.append(position[lname])
        defaults = getattr(optimizer, "defaults", {}) or {}
        eps = defaults.get("eps")
        adaptive = type(optimizer).__name__ in _ADAPTIVE or ("betas" in defaults and eps is not None)
        layout = _Layout(signature=signature, index=index, layers=list(layers.values()),
                         eps=eps if isinstance(eps, (int, float)) else None, adaptive=adaptive)
        self._layouts[id(optimizer)] = (weakref.ref(optimizer), layout)
        return layout

    def _series_key(self, optimizer: Any, name: str) -> str:
        """The layer's name, or, when another optimizer already feeds that name (two models whose layers are
        both called ``0``), the name with this optimizer's number."""
        order = self._optimizer_order.setdefault(id(optimizer), len(self._optimizer_order) + 1)
        owner = self._series_owner.setdefault(name, order)
        if owner == order:
            return name
        key = f"{name} (optimizer {order})"
        self._series_owner.setdefault(key, order)
        return key

    @staticmethod
    def _medians(layers: list[tuple[_Layer, float]]) -> tuple[float, float]:
        """The median layer's gradient per element (RMS) and in total (norm), over layers with a finite,
        non-zero one that are not gated."""
        live = [(layer, s) for layer, s in layers if s > 0 and math.isfinite(s) and not layer.gated]
        if not live:
            return 0.0, 0.0
        return (median(math.sqrt(s / layer.numel) for layer, s in live), median(math.sqrt(s) for _, s in live))

    def _gate(self, layout: _Layout, sq: list[float]) -> None:
        """Mark the layers whose gradient is exactly zero while others' are not (behind a closed gate), and
        wake those whose gradient has reached ``AWAKE`` of the median layer's."""
        pairs = list(zip(layout.layers, sq, strict=True))
        if not any(s > 0 and math.isfinite(s) for _, s in pairs):
            return  # nothing flowed anywhere (a constant loss): no gate to tell apart
        median_rms, median_norm = self._medians(pairs)
        for layer, s in pairs:
            if s == 0:
                layer.gated = True
            elif layer.gated and median_rms > 0 and math.isfinite(s):
                ratio = max(math.sqrt(s / layer.numel) / median_rms, math.sqrt(s) / median_norm)
                if ratio >= AWAKE:
                    layer.gated = False
                    layer.history.clear()
                    layer.steps.clear()
                    layer.dropped_peak = 0.0
                    layer.low_streak = layer.high_streak = 0

    def _record(self, layer: _Layer, step: int, norm: float) -> None:
        points = self.series.setdefault(layer.key, [])
        if layer.gated:
            self._point(points, step, norm)
            return
        layer.history.append(norm)
        layer.steps.append(step)
        if len(layer.history) > 32:
            if math.isfinite(layer.history[0]):
                layer.dropped_peak = max(layer.dropped_peak, layer.history[0])
            del layer.history[0], layer.steps[0]
        self._point(points, step, norm)

    @staticmethod
    def _point(points: list[tuple[int, float]], step: int, norm: float) -> None:
        if points and points[-1][0] == step:  # a second optimizer holding the same layer, or a re-step
            points[-1] = (step, norm)
            return
        points.append((step, norm))
        if len(points) > MAX_POINTS:
            del points[1:-1:2]  # keep the first and the last, thin the rest evenly

    # ------------------------------------------------------------------ checks
    def _check_vanishing(self, optimizer: Any, layout: _Layout, sq: list[float]) -> None:
        pairs = list(zip(layout.layers, sq, strict=True))
        if sum(1 for layer, s in pairs if s > 0 and math.isfinite(s) and not layer.gated) < 3:
            return
        median_rms, median_norm = self._medians(pairs)
        if median_rms <= 0 or median_norm <= 0:
            return
        low: list[_Layer] = []
        for layer, s in pairs:
            if s <= 0 or not math.isfinite(s) or layer.numel < MIN_NUMEL or layer.gated:
                layer.low_streak = 0
                continue
            norm = math.sqrt(s)
            ratio = max(math.sqrt(s / layer.numel) / median_rms, norm / median_norm)
            if ratio >= VANISH:
                layer.low_streak = 0
                continue
            if layer.low_streak == 0:
                layer.low_start = norm
            layer.low_streak += 1
            layer.low_ratio = ratio
            if layer.low_streak >= VANISH_STEPS and norm <= 4 * layer.low_start:  # not waking up
                low.append(layer)
        key = (id(optimizer), VANISHING.code)
        if not low or key in self._reported:
            return
        self._reported.add(key)
        worst = min(low, key=lambda layer: layer.low_ratio)
        rms = worst.history[-1] / math.sqrt(worst.numel)
        eps_dominates = layout.eps is not None and rms < 100 * layout.eps
        severity = Severity.WARNING if (not layout.adaptive or eps_dominates) else Severity.INFO
        others = [layer.name for layer in low if layer is not worst]
        message = (f"the gradients of `{worst.name}` are {_fmt(worst.low_ratio)}x the median layer's on the last "
                   f"{worst.low_streak} checked steps (norm {_fmt(worst.history[-1])}, per element {_fmt(rms)})")
        if others:
            message += f"; also {', '.join(f'`{n}`' for n in others[:4])}" + (
                f" and {len(others) - 4} more" if len(others) > 4 else "")
        if severity is Severity.WARNING:
            if layout.adaptive:
                message += f": so small that {type(optimizer).__name__}'s eps ({layout.eps:g}) dominates its updates"
            else:
                message += ": with this optimizer the layer's updates are that much smaller, so it barely learns"
        else:
            message += (f": {type(optimizer).__name__} rescales each update, so the layer still moves, but the "
                        "signal reaching it is mostly lost")
        self.session.report(
            VANISHING, message, subject=worst.name, severity=severity, key=key,
            fix="use ReLU/GELU instead of sigmoid/tanh between layers, add normalisation (LayerNorm/BatchNorm) or "
                "residual connections, and initialise for the activation (`nn.init.kaiming_normal_`)",
            ratio=worst.low_ratio, layers=[worst.name, *others])

    def _check_exploding(self, optimizer: Any, layout: _Layout) -> bool:
        """Report the exploding layers; whether one is rising towards it and not reported yet."""
        key = (id(optimizer), EXPLODING.code)
        hits: list[tuple[float, _Layer, str]] = []
        rising = False
        for layer in layout.layers:
            h = layer.history
            now = h[-1] if h else 0.0
            if layer.gated or not math.isfinite(now) or now <= 0 or len(h) < 2:
                layer.high_streak = 0
                continue
            # jump over the median of the checked steps before the jump started
            start = len(h) - 1 - layer.high_streak
            before = [x for x in h[max(0, start - 10):start] if math.isfinite(x) and x > 0]
            if len(before) >= BASELINE_MIN:
                base = median(before)
                if now >= JUMP * base and now > ABOVE_PEAK * layer.peak_before(start):
                    layer.high_streak += 1
                    rising = True
                    if layer.high_streak >= 2:
                        hits.append((now / base, layer, "jump"))
                    continue
                rising = rising or now >= RISING * base
            layer.high_streak = 0
            tail = h[-(GROWTH_STEPS + 1):]
            if (len(tail) == GROWTH_STEPS + 1 and all(0 < a < b for a, b in itertools.pairwise(tail))
                    and tail[-1] >= JUMP * tail[0] and tail[-1] > ABOVE_PEAK * layer.peak_before(len(h) - len(tail))):
                hits.append((tail[-1] / tail[0], layer, "growth"))
        if key in self._reported:
            return False
        if not hits:
            return rising
        self._reported.add(key)
        factor, worst, how = max(hits, key=lambda hit: hit[0])
        points = list(zip(worst.steps, worst.history, strict=True))[-(GROWTH_STEPS + 1):]
        trend = ", ".join(f"{_fmt(n)} (step {s})" for s, n in points)
        share = len(hits) / len(layout.layers)
        scope = (f"; {len(hits)} of {len(layout.layers)} layers at once: the whole model is diverging"
                 if share > 0.5 and len(layout.layers) > 2 else
                 (f"; also {', '.join(f'`{h[1].name}`' for h in hits if h[1] is not worst)}" if len(hits) > 1 else ""))
        verb = "jumped" if how == "jump" else "grew at every checked step"
        self.session.report(
            EXPLODING,
            f"the gradient norm of `{worst.name}` {verb} to {_fmt(factor)}x its earlier level: {trend}{scope}",
            subject=worst.name, key=key,
            fix="clip gradients before the step (`torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)`), lower "
                "the learning rate or add a warm-up",
            factor=factor, layers=[h[1].name for h in hits])
