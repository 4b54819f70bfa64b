"""The update an optimizer's last ``step()`` should have applied to a parameter, and whether it could show.

Read from what the step left behind (its gradient and the optimizer's state, after the step), per element,
on a slice of the parameter:

- SGD: ``lr * (g + wd * p)``, or with momentum ``lr * buf`` (``g + momentum * buf`` with Nesterov), from the
  momentum buffer the step wrote;
- Adam / AdamW (and Adam's ``decoupled_weight_decay``): ``lr * m̂ / (sqrt(v̂) + eps)`` from the moments the
  step wrote (the largest ``v`` with amsgrad), plus AdamW's ``lr * wd * p``;
- RMSprop (not centred): ``lr * g / (sqrt(v) + eps)``, or ``lr * buf`` with momentum; Adagrad: ``clr * g /
  (sqrt(sum) + eps)``;
- any other optimizer: ``min(lr * |g|, lr)``, which is never above what SGD-like steps (``lr * g``) or
  sign-like ones (about ``lr``, Adam's family, Lion) apply, so it never claims an update that would not show.
  LBFGS and Rprop are not judged: their steps stop or shrink on their own (a line search's tolerance, a sign
  change that zeroes a step).

An element's update *shows* when it is at least ``MARGIN`` times the float spacing at its value,
``torch.finfo(dtype).eps * |p|`` (or ``tiny`` at zero): rounding cannot then leave the element where it was.
"""

from __future__ import annotations

from typing import Any

MARGIN = 2.0
_UNJUDGED = ("LBFGS", "Rprop")


def flat(t: Any, n: int) -> Any | None:
    """The first ``n`` elements of ``t`` (its local shard, complex as real pairs), flattened, in float64; None
    when ``t`` is not a tensor of at least ``n`` elements."""
    from torchpact.watch.watchers._local import local, real_view

    if t is None or not hasattr(t, "detach"):
        return None
    t = real_view(local(t)).reshape(-1)
    return None if t.numel() < n else t[:n].double()


def _scalar(value: Any) -> float:
    return float(value)


def expected_update(optimizer: Any, group: dict, p: Any, n: int, lr: float) -> Any | None:
    """|update| per element of the first ``n`` elements of ``p`` (as ``flat`` gives them), or None when the
    optimizer's step is not judged."""
    import torch

    grad, weight = flat(p.grad, n), flat(p, n)
    if grad is None or weight is None:
        return None

    names = {k.__name__ for k in type(optimizer).__mro__}
    if names & set(_UNJUDGED):
        return None
    state = optimizer.state.get(p, {}) if hasattr(optimizer, "state") else {}
    wd = group.get("weight_decay", 0) or 0
    try:
        wd = _scalar(wd)
    except (TypeError, ValueError):
        wd = 0.0
    with torch.no_grad():
        if "SGD" in names:
            momentum = _scalar(group.get("momentum", 0) or 0)
            d = grad + wd * weight if wd else grad
            if momentum:
                buf = flat(state.get("momentum_buffer"), n)
                if buf is None:
                    return None
                d = d + momentum * buf if group.get("nesterov") else buf
            return lr * d.abs()
        if "Adam" in names and not names & {"Adamax", "NAdam", "RAdam", "SparseAdam"}:
            m, v = flat(state.get("exp_avg"), n), flat(state.get("exp_avg_sq"), n)
            if m is None or v is None or "step" not in state:
                return None
            if group.get("amsgrad"):
                v = flat(state.get("max_exp_avg_sq"), n)
                if v is None:
                    return None
            beta1, beta2 = (_scalar(b) for b in group.get("betas", (0.9, 0.999)))
            t = _scalar(state["step"])
            eps = _scalar(group.get("eps", 1e-8))
            step = lr * (m / (1 - beta1 ** t)) / ((v / (1 - beta2 ** t)).sqrt() + eps)
            if wd and (group.get("decoupled_weight_decay") or "AdamW" in names):
                step = step + lr * wd * weight
            return step.abs()
        if "RMSprop" in names and not group.get("centered"):
            v = flat(state.get("square_avg"), n)
            if v is None:
                return None
            d = grad + wd * weight if wd else grad
            if _scalar(group.get("momentum", 0) or 0):
                buf = flat(state.get("momentum_buffer"), n)
                return None if buf is None else lr * buf.abs()
            return lr * d.abs() / (v.sqrt() + _scalar(group.get("eps", 1e-8)))
        if "Adagrad" in names:
            total = flat(state.get("sum"), n)
            if total is None or "step" not in state:
                return None
            d = grad + wd * weight if wd else grad
            clr = lr / (1 + (_scalar(state["step"]) - 1) * _scalar(group.get("lr_decay", 0) or 0))
            return clr * d.abs() / (total.sqrt() + _scalar(group.get("eps", 1e-10)))
        return torch.minimum(lr * grad.abs(), torch.full_like(grad, lr))


def shows(update: Any, p: Any, n: int) -> tuple[bool, float]:
    """Whether some element's update is at least ``MARGIN`` times the float spacing of ``p``'s dtype at its
    value, and the largest update."""
    import torch

    info = torch.finfo(p.dtype if not p.is_complex() else p.real.dtype)
    with torch.no_grad():
        weight = flat(p, n)
        spacing = (weight.abs() * info.eps).clamp_min(info.tiny)
        return bool((update >= MARGIN * spacing).any()), float(update.max()) if update.numel() else 0.0
