"""Per-tensor reductions over many tensors at once: one batched op and one host read per device.

Watchers read every parameter or gradient on sampled steps; one small op per tensor costs more in
dispatch than the reduction itself, and one ``tolist()`` per tensor would sync the host each time.
"""

from __future__ import annotations

from typing import Any


def by_device(tensors: list[Any]) -> list[list[int]]:
    """Positions of ``tensors`` grouped by device, in first-seen order."""
    groups: dict[Any, list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault(t.device, []).append(i)
    return list(groups.values())


def all_zero(tensors: list[Any]) -> list[bool]:
    """Whether each tensor is exactly zero everywhere (a NaN or an inf is not zero; compared in the
    tensor's own dtype, so a float64 gradient of 1e-200 is not zero although it is 0 as float32).

    The 2-norm screens first: it is one fused pass (on CPU ``_foreach_norm(inf)`` is 15x slower),
    NaN and overflow keep it non-zero, and it is 0 for an all-zero tensor. Only a 2-norm of 0 is not
    proof (tiny values may square to 0 where it is summed in float32, as on CUDA), so those tensors alone
    are confirmed with max |t|.
    """
    zero = _is_zero(tensors, 2)
    maybe = [i for i, z in enumerate(zero) if z]
    for i, z in zip(maybe, _is_zero([tensors[i] for i in maybe], float("inf"))):
        zero[i] = z
    return zero


def _is_zero(tensors: list[Any], order: float) -> list[bool]:
    import torch

    out = [False] * len(tensors)
    with torch.no_grad():
        for idx in by_device(tensors):
            norms = torch._foreach_norm([tensors[i] for i in idx], order)
            for i, z in zip(idx, (torch.stack(norms) == 0).tolist()):
                out[i] = z
    return out
