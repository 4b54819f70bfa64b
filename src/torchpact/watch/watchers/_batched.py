"""Per-tensor reductions over many tensors at once: one batched op and one host read per device.

Watchers read every parameter or gradient on sampled steps; one small op per tensor costs more in
dispatch than the reduction itself, and one ``tolist()`` per tensor would sync the host each time.
"""

from __future__ import annotations

import math
from typing import Any

from torchpact.watch.step_cache import GradNorms, StepCache


def by_device(tensors: list[Any]) -> list[list[int]]:
    """Positions of ``tensors`` grouped by device, in first-seen order."""
    groups: dict[Any, list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault(t.device, []).append(i)
    return list(groups.values())


def all_zero(tensors: list[Any], cache: StepCache | None = None) -> list[bool]:
    """Whether each tensor is exactly zero everywhere (a NaN or an inf is not zero; compared in the
    tensor's own dtype, so a float64 gradient of 1e-200 is not zero although it is 0 as float32).

    The 2-norm screens first: it is one fused pass (on CPU ``_foreach_norm(inf)`` is 15x slower),
    NaN and overflow keep it non-zero, and it is 0 for an all-zero tensor (with ``cache``, the norms
    another watcher took of the same gradients in this step pre-hook: see ``grad_norms``). Only a
    2-norm of 0 is not proof (tiny values may square to 0 where it is summed in float32, as on CUDA),
    so those tensors alone are confirmed with max |t|.
    """
    if not tensors:
        return []
    zero = (grad_norms(tensors, cache) == 0).tolist()
    maybe = [i for i, z in enumerate(zero) if z]
    for i, z in zip(maybe, _is_zero([tensors[i] for i in maybe], float("inf")), strict=True):
        zero[i] = z
    return zero


def _is_zero(tensors: list[Any], order: float) -> list[bool]:
    import torch

    out = [False] * len(tensors)
    with torch.no_grad():
        for idx in by_device(tensors):
            norms = torch._foreach_norm([tensors[i] for i in idx], order)
            for i, z in zip(idx, (torch.stack(norms) == 0).tolist(), strict=True):
                out[i] = z
    return out


def grad_norms(grads: list[Any], cache: StepCache | None = None) -> Any:
    """The 2-norm of each of ``grads`` as one vector on the first one's device, in order: one
    ``_foreach_norm`` per device (accumulated in float32 for half-precision gradients; float64 when a
    gradient is, so a finite float64 norm never reads as inf).

    With ``cache`` (``Session.cache``, emptied after each step callback delivery) the norms are computed
    once per step pre-hook: nonfinite, grad_health and gradient_flow all read the same gradients there,
    and on a small GPT each ``_foreach_norm`` over them is 0.2 ms of a sampled step. A gradient is only
    reused if it is the very tensor, at the very version, that was measured.
    """
    if cache is not None:
        got = cache.grad_norms
        if got is not None:
            reused = _reuse(grads, got)
            if reused is not None:
                return reused
    norms = _norms(grads)
    if cache is not None:
        cache.grad_norms = GradNorms({id(g): i for i, g in enumerate(grads)}, list(grads),
                                     [_version(g) for g in grads], norms)
    return norms


FLAT = 1 << 12   # elements: tensors up to this size are summed within one copy of all such, a bigger one alone


def surely_finite(tensors: list[Any]) -> bool:
    """Whether every element of ``tensors`` is finite, when sums show it: a NaN or an inf anywhere makes a sum
    non-finite. Each tensor of more than ``FLAT`` elements is summed where it lies; the smaller ones (biases,
    norms: many, and a dispatch costs more than their copy) within one copy of them all; the sums stacked and
    read once. nonfinite runs it on every unsampled step, right after backward, where what costs is memory
    traffic, not dispatch: copying a tensor reads it and writes a fresh buffer that the sum then reads again,
    so ``FLAT`` is where a copy costs about what one more op does (16 KB). Measured in a training loop on
    torch 2.13 CPU (Adam, gradients set to None by zero_grad): the check added 71 us to a TextLSTM step of
    1.1 ms when every tensor up to 64 KB was copied, 8 us summing each where it lies. Only tried for CPU
    tensors of one floating dtype (half precision summed in float32). False means not shown (a sum
    overflowed, or it was not tried): look at each."""
    first = tensors[0]
    dtype = first.dtype
    if not (first.is_cpu and dtype.is_floating_point):  # (a complex sum is no float to test)
        return False
    import torch

    wide = torch.float32 if dtype in (torch.float16, torch.bfloat16) else None
    small: list[Any] = []
    sums: list[Any] = []
    for t in tensors:  # one loop of attribute reads: this runs on every step
        if t.dtype is not dtype or not t.is_cpu:
            return False
        if t.numel() <= FLAT:
            small.append(t)
        else:
            sums.append(t.sum(dtype=wide) if wide else t.sum())
    if len(small) > 1:
        flat = torch._C._nn.flatten_dense_tensors(small)  # (torch._utils._flatten_dense_tensors, unwrapped)
        sums.append(flat.sum(dtype=wide) if wide else flat.sum())
    elif small:
        sums.append(small[0].sum(dtype=wide) if wide else small[0].sum())
    if len(sums) == 1:
        return math.isfinite(sums[0].item())
    return math.isfinite(torch.stack(sums).sum().item())  # (a float32 sum of finite sums may overflow: then False)


def _reuse(grads: list[Any], measured: GradNorms) -> Any:
    position, seen, versions, norms = measured
    idx = [position.get(id(g), -1) for g in grads]
    for i, g in zip(idx, grads, strict=True):
        if i < 0 or seen[i] is not g or versions[i] != _version(g):
            return None
    if len(idx) == len(seen) and idx == list(range(len(seen))):
        return norms
    import torch

    return norms[torch.tensor(idx, device=norms.device)]


def _version(t: Any) -> Any:
    try:
        return t._version
    except RuntimeError:  # an inference tensor has no version counter: a token equal to nothing, never reused
        return object()


def _norms(grads: list[Any]) -> Any:
    import torch

    low_precision = (torch.float16, torch.bfloat16)
    first = grads[0]
    # One device and dtype is the usual case, and nonfinite's check runs it on every step: no grouping
    # and no no_grad object (on a tiny MLP this hook is a visible share of the step).
    if all(g.device == first.device and g.dtype == first.dtype for g in grads):
        enabled = torch.is_grad_enabled()
        if enabled:
            torch._C._set_grad_enabled(False)
        try:
            low = first.dtype in low_precision
            norms = torch._foreach_norm(grads, 2, dtype=torch.float32) if low else torch._foreach_norm(grads)
            return torch.stack(norms)
        finally:
            if enabled:
                torch._C._set_grad_enabled(True)
    dtype = torch.float64 if any(g.dtype == torch.float64 for g in grads) else torch.float32
    groups: dict[tuple, list[int]] = {}
    for i, g in enumerate(grads):
        groups.setdefault((g.device, g.dtype), []).append(i)
    parts, order = [], []
    with torch.no_grad():
        for (_, group_dtype), idx in groups.items():
            group = [grads[i] for i in idx]
            low = group_dtype in low_precision
            norms = torch._foreach_norm(group, 2, dtype=torch.float32) if low else torch._foreach_norm(group)
            parts.append(torch.stack(norms).to(first.device, dtype, non_blocking=True))
            order.extend(idx)
        out = torch.cat(parts)
        return out[torch.tensor(sorted(range(len(order)), key=order.__getitem__), device=first.device)]
