"""What actually reaches the loss: probabilities where logits are expected, and the reverse, and shapes
that broadcast.

Two ways in, both on sampled steps. Loss modules (``nn.CrossEntropyLoss``, ``nn.NLLLoss``,
``nn.BCELoss``, ``nn.BCEWithLogitsLoss``, ``nn.MSELoss``, ``nn.L1Loss``, ...) are seen through the
session's forward hook. Calls of ``torch.nn.functional`` losses (``F.cross_entropy(...)``, also inside
a model's ``forward``) are seen through wrappers set on those attributes of ``torch.nn.functional``
while the session runs: a call of any other torch function costs nothing. (It used to be a
``TorchFunctionMode``, which every torch call of the script paid while it was on: about 6 µs each
measured in place on torch 2.13 CPU, 4,700 calls in an RL rollout's first episode.) What binds a loss
function by name before the session starts (``from torch.nn.functional import cross_entropy`` above
``torchpact.watch()``) calls the unwrapped one; ``torchpact run`` starts the session before the script
and its imports, so it sees those too. A forked DataLoader worker inherits the wrappers; they only pass
through there. While dynamo traces, they call torch's own function (``Patch``).

Where a value came from is read from its ``grad_fn`` (through views, reshapes and casts), which needs
no sync: a ``SoftmaxBackward0`` into ``cross_entropy`` is certain. Value checks (ranges, row sums)
are small reductions computed on the loss's device at the call, read back with one ``tolist()`` per
device at the end of the sampled step. Shapes are checked at the call (metadata only).
"""

from __future__ import annotations

import os
from typing import Any

from torchpact.findings import Category, Finding, Severity
from torchpact.watch.frames import user_location
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers._patch import Patch, remove_all

LOGIT_CALLS = 3          # BCEWithLogitsLoss inputs all in [0, 1] at this many checked calls ...
LOGIT_VALUES = 256       # ... over at least this many values
PENDING_MAX = 64

SOFTMAX_INTO_CE = Check(
    code="TP301",
    category=Category.NUMERICS,
    severity=Severity.ERROR,
    summary="Probabilities (a softmax output) are passed to cross_entropy, which expects logits.",
    doc="""## What it does
Looks at the input of `nn.CrossEntropyLoss` / `F.cross_entropy` on sampled steps. It reports when
the input was produced by a softmax (its `grad_fn` is `SoftmaxBackward0`, possibly through views,
reshapes or casts), or when every value is in [0, 1] and every row sums to 1 over the class
dimension: probabilities, not logits.

## Why is this bad?
`cross_entropy` applies `log_softmax` to its input itself, so it computes
`log_softmax(softmax(logits))`: the loss of a distribution squashed towards uniform. On torch 2.13,
with 3 classes the loss of a perfect prediction is `log(1 + 2/e) = 0.5514`, never 0, and a confidently
wrong prediction gets a gradient of about `6e-05` instead of about `1.0`. Training runs, slowly, to a
worse model, with no error anywhere.

## How to fix
Pass the logits (the input of the softmax) to the loss; keep the softmax for predictions only. If
the model ends in `nn.Softmax`, remove it and apply the softmax at inference.""",
)

BCE_PROBABILITY_LOGIT = Check(
    code="TP303",
    category=Category.NUMERICS,
    severity=Severity.ERROR,
    severity_note="`warning` when values in [0, 1] only look like probabilities; `info` when a sigmoid's output "
                  "reaches `BCELoss` but no prediction is saturated on the wrong side (advice: it trains correctly "
                  "until a confident mistake saturates)",
    summary="Probabilities and logits are mixed up in a binary cross-entropy loss.",
    doc="""## What it does
Looks at the input of the binary cross-entropy losses on sampled steps:

- `nn.BCEWithLogitsLoss` / `F.binary_cross_entropy_with_logits` given the output of a sigmoid or a
  softmax (read from its `grad_fn`, through views and casts): certain, an error;
- the same given values that are all in [0, 1] at several calls (hundreds of values, never one
  below 0): most likely probabilities, a warning (logits of a model that predicts "positive" with
  low confidence for every single sample would look the same). Values are evidence only where the
  input's origin is unknown: an input that a layer with free weights produced — its `grad_fn`,
  through views and casts, is `AddmmBackward0` / `MmBackward0` (`nn.Linear`, `x @ w`),
  `BmmBackward0`, `ConvolutionBackward0` or `EmbeddingBackward0` — is a logit by construction,
  unbounded, whatever values it takes: an untrained GAN critic's logits often all lie in
  [0.04, 0.08] for its first calls;
- `nn.BCELoss` / `F.binary_cross_entropy` given a sigmoid output: an error when some predictions
  are saturated (exactly 0 or 1) on the wrong side of their target, else advice (`info`): the loss
  and gradients are right until a confident mistake saturates (the VAE and DCGAN of
  pytorch/examples train correctly this way).

`BCELoss` given logits needs no watcher: on torch 2.13 it raises "all elements of input should be
between 0 and 1" on CPU and a device-side assert on CUDA.

## Why is this bad?
`binary_cross_entropy_with_logits` applies the sigmoid itself: fed probabilities, it computes
`sigmoid(sigmoid(z))`, which only spans (0.5, 0.73), so the loss can never get near 0 and the
gradients are squashed — the model learns slowly and poorly, silently. The other way round,
`sigmoid` then `binary_cross_entropy` saturates: in float32 `sigmoid(17.0)` is exactly 1.0, the loss
is clamped at 100 and the gradient on the logit is exactly 0, so the most confident mistakes teach
the model nothing.

## How to fix
Give logits to `BCEWithLogitsLoss` (drop the sigmoid before it, and the `nn.Sigmoid` at the end of
the model); apply `torch.sigmoid` only for predictions. Prefer `BCEWithLogitsLoss` on logits over
`sigmoid` + `BCELoss`.""",
)

BROADCAST_TARGET = Check(
    code="TP355",
    category=Category.NUMERICS,
    severity=Severity.ERROR,
    summary="Prediction and target shapes broadcast against each other inside the loss.",
    doc="""## What it does
Compares the shapes of a loss's prediction and target at every checked call (metadata only). It
reports when they broadcast to a shape that is neither of them — `[B, 1]` against `[B]` gives
`[B, B]`: every prediction is compared with every target.

## Why is this bad?
The loss averages B×B differences instead of B: its value and its gradient are wrong (for MSE the
model learns to predict the batch mean for every sample), and training goes on. On torch 2.13
`MSELoss`, `L1Loss`, `SmoothL1Loss` and `HuberLoss` print a UserWarning once ("Using a target size
... that is different to the input size"), which is easy to miss in a log; `KLDivLoss`,
`PoissonNLLLoss`, `GaussianNLLLoss`, `HingeEmbeddingLoss` and `MultiLabelSoftMarginLoss` broadcast
silently. (`BCELoss`, `BCEWithLogitsLoss` and `SoftMarginLoss` raise.)

## How to fix
Give the target the prediction's shape: `loss_fn(pred.squeeze(-1), target)` or
`loss_fn(pred, target.view_as(pred))` — typically a regression head with one output against a 1-D
target.""",
)

NLL_NOT_LOG_PROBS = Check(
    code="TP357",
    category=Category.NUMERICS,
    severity=Severity.ERROR,
    severity_note="`warning` when nll_loss is given raw scores (logits) rather than probabilities",
    summary="NLLLoss is given probabilities or logits instead of log-probabilities.",
    doc="""## What it does
Looks at the input of `nn.NLLLoss` / `F.nll_loss` on sampled steps. It reports probabilities (a
softmax output by its `grad_fn`, or values all in [0, 1] whose rows sum to 1) as an error, and raw
logits (most rows holding both positive and negative values, which a log-probability never is) as
a warning.

## Why is this bad?
`nll_loss` does not take a logarithm: it returns `-input[target]` (averaged). On probabilities the
loss is `-p`, between -1 and 0, whose gradient does not grow for confident mistakes — the model
barely learns from them. On logits it is `-logit`, unbounded below: the loss goes down forever by
pushing the target logit up, whatever the other classes do. Nothing raises on torch 2.13.

## How to fix
Give `nll_loss` log-probabilities: `F.log_softmax(logits, dim=1)` (and `nn.LogSoftmax` at the end
of the model), or give the logits to `nn.CrossEntropyLoss`, which is `log_softmax` + `nll_loss` in
one.""",
)

_PASS_THROUGH = frozenset({
    "ViewBackward0", "UnsafeViewBackward0", "ReshapeAliasBackward0", "AsStridedBackward0",
    "SqueezeBackward0", "SqueezeBackward1", "SqueezeBackward2", "UnsqueezeBackward0",
    "TransposeBackward0", "TransposeBackward1", "TBackward0", "PermuteBackward0", "CloneBackward0",
    "ExpandBackward0", "ToCopyBackward0", "SliceBackward0", "SelectBackward0", "IndexBackward0",
    "NarrowBackward0", "SplitBackward0", "UnbindBackward0", "ContiguousBackward0",
})

# ops whose output is an affine function of free weights: unbounded, a logit whatever its values
_WEIGHTED_LAYER = frozenset({
    "AddmmBackward0", "MmBackward0", "BmmBackward0", "ConvolutionBackward0", "EmbeddingBackward0",
})

# kind -> the names of the prediction and target arguments (positional order of F.* and of forward)
_ARGS = ("input", "target")


class _Site:
    """What is known about one call site of a loss (a loss module, or an F.* call at a line)."""

    def __init__(self, kind: str, label: str, path: str | None, line: int | None) -> None:
        self.kind = kind
        self.label = label
        self.path = path
        self.line = line
        self.calls = 0
        self.values = 0
        self.lo = float("inf")
        self.hi = float("-inf")
        self.extra: dict = {}


def _tables() -> tuple[dict, dict]:
    import torch.nn as nn

    functions = {  # by their name in torch.nn.functional
        "cross_entropy": "cross_entropy", "nll_loss": "nll_loss",
        "binary_cross_entropy": "bce", "binary_cross_entropy_with_logits": "bce_logits",
        "mse_loss": "regression", "l1_loss": "regression", "smooth_l1_loss": "regression",
        "huber_loss": "regression", "kl_div": "silent", "poisson_nll_loss": "silent",
        "gaussian_nll_loss": "silent", "hinge_embedding_loss": "silent",
        "multilabel_soft_margin_loss": "silent",
    }
    modules = {
        nn.CrossEntropyLoss: "cross_entropy", nn.NLLLoss: "nll_loss", nn.BCELoss: "bce",
        nn.BCEWithLogitsLoss: "bce_logits", nn.MSELoss: "regression", nn.L1Loss: "regression",
        nn.SmoothL1Loss: "regression", nn.HuberLoss: "regression", nn.KLDivLoss: "silent",
        nn.PoissonNLLLoss: "silent", nn.GaussianNLLLoss: "silent", nn.HingeEmbeddingLoss: "silent",
        nn.MultiLabelSoftMarginLoss: "silent",
    }
    return functions, modules


def _module_kind(module: Any, modules: dict) -> str | None:
    """The loss kind of a torch loss module, or of a subclass that keeps torch's ``forward``."""
    cls = type(module)
    kind = modules.get(cls)
    if kind is not None:
        return kind
    for base, kind in modules.items():
        if isinstance(module, base):
            return kind if cls.forward is base.forward else None
    return None


def _produced_by(tensor: Any) -> str | None:
    """The ``grad_fn`` name of the op that produced ``tensor``, looking through views and casts."""
    fn = tensor.grad_fn
    for _ in range(10):
        if fn is None:
            return None
        name = fn.name()
        if name not in _PASS_THROUGH:
            return name
        nexts = fn.next_functions
        if not nexts:
            return None
        fn = nexts[0][0]
    return None


def _plain(t: Any) -> bool:
    """A real tensor we may read: no subclass (fake, DTensor, proxy), not functorch-wrapped, not meta."""
    import torch

    if type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter:
        return False
    if t.device.type == "meta" or t.numel() == 0:
        return False
    try:
        return not torch._C._functorch.is_functorch_wrapped_tensor(t)
    except Exception:
        return True


def _tolerance(dtype: Any) -> float:
    import torch

    return {torch.float16: 1e-2, torch.bfloat16: 4e-2}.get(dtype, 1e-3)


class LossInputsWatcher(Watcher):
    """Probabilities vs logits into CE / NLL / BCE losses (TP301, TP357, TP303); broadcasting targets (TP355)."""

    name = "loss_inputs"
    checks = (SOFTMAX_INTO_CE, BCE_PROBABILITY_LOGIT, BROADCAST_TARGET, NLL_NOT_LOG_PROBS)
    unsampled_calls = "none"

    def __init__(self) -> None:
        super().__init__()
        self._modules: dict = {}
        self._kinds: dict[type, str | None] = {}
        self._sites: dict[tuple, _Site] = {}
        self._pending: list[tuple[_Site, str, Any]] = []
        self._patches: list[Patch] = []
        self._pid = os.getpid()
        self._calling = False
        self._broken = False

    def attach(self, session: Any) -> None:
        super().attach(session)
        import torch.nn.functional as F

        functions, self._modules = _tables()
        for name, kind in functions.items():
            self._patches.append(Patch(F, name, self._wrap(kind), sampled_only=True))

    def _wrap(self, kind: str) -> Any:
        def make(original: Any) -> Any:
            def loss(*args: Any, **kwargs: Any) -> Any:
                # (a forked DataLoader worker inherits the wrapper: it only passes through there)
                if self._calling or not self.session.sampled or self._broken or os.getpid() != self._pid:
                    return original(*args, **kwargs)
                self._functional(original, kind, args, kwargs)
                # A function mode or tensor subclass active in the script is handed torch.nn.functional's
                # attribute, this wrapper, and calls it again from inside: that is the same call.
                self._calling = True
                try:
                    return original(*args, **kwargs)
                finally:
                    self._calling = False
            return loss
        return make

    # ---------------------------------------------------------------- calls
    def on_forward(self, module: Any, args: tuple, output: Any) -> None:
        if not self.session.sampled:
            return
        cls = type(module)
        kind = self._kinds.get(cls, "?")
        if kind == "?":
            kind = self._kinds[cls] = _module_kind(module, self._modules)
        if kind is None or len(args) < 2:
            return
        import torch

        if torch.compiler.is_compiling():
            return
        path, line = user_location(3)
        self._inspect(kind, type(module).__name__, args[0], args[1], path, line, args[2:], {})

    def _functional(self, func: Any, kind: str, args: tuple, kwargs: dict) -> None:
        try:
            import torch

            if torch._C._get_tracing_state() is not None:  # (while dynamo traces, Patch calls torch's own)
                return
            stack = self.session.module_stack()
            if stack and _module_kind(stack[-1], self._modules) is not None:
                return  # a loss module calling its function: seen by the module hook
            values = list(args[:2])
            for name in _ARGS[len(values):]:
                if name in kwargs:
                    values.append(kwargs[name])
            if len(values) < 2:
                return
            path, line = user_location(2)
            self._inspect(kind, f"F.{func.__name__}", values[0], values[1], path, line, args[2:], kwargs)
        except Exception as exc:  # never let a watcher bug reach the script through the wrapper
            self._broken = True
            from torchpact.watch.session import INTERNAL_CODE

            self.session.report_raw(Finding(
                code=INTERNAL_CODE, category=Category.INPUT, severity=Severity.WARNING,
                message=f"watcher '{self.name}' failed on a loss call ({exc.__class__.__name__}: {exc}) and "
                        "was switched off; training was not affected — please report this",
                step=self.session.step))

    def _site(self, kind: str, label: str, path: str | None, line: int | None) -> _Site:
        key = (kind, label, path, line)
        site = self._sites.get(key)
        if site is None:
            site = self._sites[key] = _Site(kind, label, path, line)
        return site

    def _inspect(self, kind: str, label: str, pred: Any, target: Any, path: str | None, line: int | None,
                 rest: tuple, kwargs: dict) -> None:
        import torch

        if not isinstance(pred, torch.Tensor) or not _plain(pred):
            return
        site = self._site(kind, label, path, line)
        site.calls += 1
        if isinstance(target, torch.Tensor) and kind in ("regression", "silent"):
            self._check_shapes(site, pred, target)
            return
        if not pred.is_floating_point():
            return
        origin = _produced_by(pred)
        if kind == "cross_entropy":
            if origin == "SoftmaxBackward0":
                self._report_ce(site, "it is the output of a softmax")
            elif origin != "LogSoftmaxBackward0" and not site.extra.get("done"):
                self._queue(site, "rows", self._row_stats(pred))
        elif kind == "nll_loss":
            if origin == "SoftmaxBackward0":
                self._report_nll_probs(site, "it is the output of a softmax")
            elif origin not in ("LogSoftmaxBackward0", "LogBackward0") and not site.extra.get("done"):
                self._queue(site, "rows", self._row_stats(pred, signs=True))
        elif kind == "bce_logits":
            if origin in ("SigmoidBackward0", "SoftmaxBackward0"):
                what = "a sigmoid" if origin == "SigmoidBackward0" else "a softmax"
                self._report_double_sigmoid(site, f"it is the output of {what}", Severity.ERROR)
            elif origin in _WEIGHTED_LAYER:
                pass  # a layer's output: logits, whatever values it happens to take (an untrained critic's)
            elif not site.extra.get("done"):
                with torch.no_grad():
                    mn, mx = torch.aminmax(pred.detach())
                    stats = torch.stack([mn.float(), mx.float()])
                self._queue(site, "range", (stats, pred.numel()))
        elif kind == "bce":
            if origin == "SigmoidBackward0" and isinstance(target, torch.Tensor) and not site.extra.get("done"):
                with torch.no_grad():
                    p, y = pred.detach(), target.detach()
                    if p.shape != y.shape:
                        return
                    wrong = (((p >= 1) & (y < 0.5)) | ((p <= 0) & (y > 0.5))).sum().float().reshape(1)
                self._queue(site, "saturated", (wrong, p.numel()))

    # ---------------------------------------------------------------- value statistics
    @staticmethod
    def _row_stats(x: Any, signs: bool = False) -> tuple[Any, int, Any]:
        """min, max, max |row sum - 1| over the class dim (and the share of rows with both signs)."""
        import torch

        with torch.no_grad():
            x = x.detach()
            cdim = 1 if x.dim() >= 2 else 0
            classes = x.shape[cdim]
            mn, mx = torch.aminmax(x)
            dev = (x.sum(dim=cdim, dtype=torch.float32) - 1).abs().amax()
            parts = [mn.float(), mx.float(), dev]
            if signs:
                tol = _tolerance(x.dtype)
                mixed = ((x.amax(dim=cdim) > tol) & (x.amin(dim=cdim) < -tol)).float().mean()
                parts.append(mixed)
            return torch.stack(parts), classes, x.dtype

    def _queue(self, site: _Site, what: str, payload: Any) -> None:
        self._pending.append((site, what, payload))
        if len(self._pending) >= PENDING_MAX:
            self._flush()

    def on_step_end(self, step: int) -> None:
        if self._pending:
            self._flush()

    def on_close(self) -> None:
        remove_all(self._patches)
        if self._pending:
            self._flush()

    def _flush(self) -> None:
        """Read back every pending statistic: one ``tolist()`` per device."""
        import torch

        pending, self._pending = self._pending, []
        by_device: dict[Any, list[int]] = {}
        tensors = []
        for i, (_, _what, payload) in enumerate(pending):
            stats = payload[0]
            by_device.setdefault(stats.device, []).append(i)
            tensors.append(stats)
        values: dict[int, list[float]] = {}
        for idx in by_device.values():
            sizes = [tensors[i].numel() for i in idx]
            flat = torch.cat([tensors[i].reshape(-1) for i in idx]).tolist()
            pos = 0
            for i, n in zip(idx, sizes, strict=True):
                values[i] = flat[pos:pos + n]
                pos += n
        for i, (site, what, payload) in enumerate(pending):
            if site.extra.get("done"):
                continue
            v = values[i]
            if what == "rows":
                self._judge_rows(site, v, payload[1], payload[2])
            elif what == "range":
                self._judge_range(site, v, payload[1])
            elif what == "saturated":
                self._judge_saturated(site, v[0], payload[1])

    def _judge_rows(self, site: _Site, v: list[float], classes: int, dtype: Any) -> None:
        lo, hi, dev = v[0], v[1], v[2]
        tol = _tolerance(dtype)
        probabilities = classes >= 2 and lo >= 0.0 and hi <= 1.0 and dev <= tol * max(1.0, classes / 1000)
        if site.kind == "cross_entropy":
            if probabilities:
                self._report_ce(site, "every value is in [0, 1] and every row sums to 1: these are probabilities")
            elif lo < 0.0:
                site.extra["done"] = True  # logits, as expected: no need to look again
        elif probabilities:
            self._report_nll_probs(site, "every value is in [0, 1] and every row sums to 1: these are probabilities")
        elif len(v) > 3 and v[3] >= 0.5:
            site.extra["done"] = True
            self.session.report(
                NLL_NOT_LOG_PROBS,
                f"{site.label} is given raw scores, not log-probabilities: {v[3]:.0%} of the rows hold both positive "
                f"and negative values (up to {hi:.3g}), and a log-probability is never above 0; nll_loss only "
                "returns -input[target], so the loss is unbounded below and training just pushes the target "
                "score up",
                severity=Severity.WARNING, subject=site.label, path=site.path, line=site.line,
                key=("nll", site.path, site.line, site.label),
                fix="apply F.log_softmax(x, dim=1) (nn.LogSoftmax) before nll_loss, or give the raw scores to "
                    "nn.CrossEntropyLoss instead")
        elif hi <= tol and lo < 0.0:
            site.extra["done"] = True  # log-probabilities, as expected

    def _judge_range(self, site: _Site, v: list[float], numel: int) -> None:
        site.lo, site.hi = min(site.lo, v[0]), max(site.hi, v[1])
        site.values += numel
        site.extra["checked"] = site.extra.get("checked", 0) + 1
        if site.lo < 0.0 or site.hi > 1.0:
            site.extra["done"] = True  # a negative or a value above 1: logits, as expected
            return
        if site.extra["checked"] >= LOGIT_CALLS and site.values >= LOGIT_VALUES:
            self._report_double_sigmoid(
                site, f"all {site.values:,} values seen at {site.extra['checked']} calls are in "
                      f"[{site.lo:.3g}, {site.hi:.3g}] and none is negative: they look like probabilities",
                Severity.WARNING)

    def _judge_saturated(self, site: _Site, wrong: float, numel: int) -> None:
        site.extra["done"] = True
        saturated = int(wrong)
        if saturated:
            message = (f"{site.label} is given the output of a sigmoid and {saturated} of {numel:,} predictions "
                       "are saturated (exactly 0 or 1) on the wrong side of their target: their loss is clamped at "
                       "100 and their gradient is exactly 0, so the most confident mistakes teach the model nothing")
            severity = Severity.ERROR
        else:
            message = (f"{site.label} is given the output of a sigmoid: in float32 sigmoid(17) is exactly 1.0, so "
                       "once predictions get confident their loss is clamped at 100 and their gradient is 0")
            severity = Severity.INFO  # correct until a confident mistake saturates: advice, not a bug
        self.session.report(
            BCE_PROBABILITY_LOGIT, message, severity=severity, subject=site.label, path=site.path,
            line=site.line, key=("bce", site.path, site.line, site.label),
            fix="drop the sigmoid and use nn.BCEWithLogitsLoss / F.binary_cross_entropy_with_logits on the logits")

    # ---------------------------------------------------------------- reports
    def _report_ce(self, site: _Site, why: str) -> None:
        site.extra["done"] = True
        self.session.report(
            SOFTMAX_INTO_CE,
            f"{site.label} is given probabilities, not logits ({why}); cross_entropy applies log_softmax itself, "
            "so the loss of a perfect prediction cannot reach 0 and confident mistakes get almost no gradient",
            subject=site.label, path=site.path, line=site.line, key=("ce", site.path, site.line, site.label),
            fix="pass the logits (the input of the softmax) to the loss; keep the softmax for predictions only")

    def _report_nll_probs(self, site: _Site, why: str) -> None:
        site.extra["done"] = True
        self.session.report(
            NLL_NOT_LOG_PROBS,
            f"{site.label} is given probabilities, not log-probabilities ({why}); nll_loss takes no logarithm, so "
            "the loss is -p, between -1 and 0, and confident mistakes get almost no gradient",
            subject=site.label, path=site.path, line=site.line, key=("nll", site.path, site.line, site.label),
            fix="use F.log_softmax(x, dim=1) instead of softmax before nll_loss, or give the logits to "
                "nn.CrossEntropyLoss")

    def _report_double_sigmoid(self, site: _Site, why: str, severity: Severity) -> None:
        site.extra["done"] = True
        self.session.report(
            BCE_PROBABILITY_LOGIT,
            f"{site.label} is given probabilities, not logits ({why}); it applies the sigmoid itself, so it "
            "computes sigmoid(sigmoid(x)), which stays in (0.5, 0.73): the loss cannot get near 0 and the "
            "gradients are squashed",
            severity=severity, subject=site.label, path=site.path, line=site.line,
            key=("bce_logits", site.path, site.line, site.label),
            fix="pass the logits (drop the sigmoid before the loss, or the nn.Sigmoid at the end of the model); "
                "apply torch.sigmoid only for predictions")

    def _check_shapes(self, site: _Site, pred: Any, target: Any) -> None:
        import torch

        if site.extra.get("done") or pred.shape == target.shape:
            return
        try:
            shape = torch.broadcast_shapes(pred.shape, target.shape)
        except RuntimeError:
            return  # not broadcastable: torch raises by itself
        if shape == pred.shape or shape == target.shape:
            return  # one side broadcast over the other: may be intended (a fixed template, a shared target)
        site.extra["done"] = True
        warned = site.kind == "regression"
        p, t, b = (list(s) for s in (pred.shape, target.shape, shape))
        self.session.report(
            BROADCAST_TARGET,
            f"{site.label} gets a prediction of shape {p} and a target of shape {t}, which broadcast to {b}: every "
            f"prediction is compared with every target, so the loss and its gradients are wrong"
            + (" (torch only warns 'Using a target size that is different to the input size')" if warned
               else " (torch does this silently)"),
            subject=site.label, path=site.path, line=site.line, key=("shape", site.path, site.line, site.label),
            fix="give the target the prediction's shape: `pred.squeeze(-1)` or `target.view_as(pred)`")
