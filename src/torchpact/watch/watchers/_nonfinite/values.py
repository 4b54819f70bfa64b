"""Reading tensors without stalling: 0-d sums taken without a host sync, read together later.

"Bad" means NaN or +inf. -inf alone is how masks are written (``masked_fill(mask, -inf)``) and
log-probabilities of impossible events, so it is tracked but never reported by itself.
"""

from __future__ import annotations

from typing import Any

torch: Any = None  # bound by ``bind()`` when the watcher attaches: the recording hooks use it on every module call

# A module call made with autocast off on every device: its re-run turns autocast off on the device of
# its inputs (the state around the re-run is the outermost call's, which may have it on).
AUTOCAST_OFF = ("", False, None)


def bind() -> None:
    global torch
    import torch as _torch

    torch = _torch


def autocast_at_call(t: Any) -> tuple[str, bool, Any] | None:
    """(device type, enabled, dtype) of autocast for ``t``'s device now: ``AUTOCAST_OFF`` when it is off on every
    device, None for a device without autocast."""
    if not torch._C._is_any_autocast_enabled():
        return AUTOCAST_OFF
    device = t.device.type
    try:
        enabled = torch.is_autocast_enabled(device)
        return (device, enabled, torch.get_autocast_dtype(device) if enabled else None)
    except (RuntimeError, TypeError):  # a device type without autocast
        return None


def floating_tensors(value: Any, depth: int = 0) -> list[Any]:
    """Floating tensors in a module's args or output (tensor, sequence, dict, ModelOutput)."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if depth > 2:
        return []
    out: list[Any] = []
    if isinstance(value, (tuple, list)):
        for v in value[:32]:
            out.extend(floating_tensors(v, depth + 1))
    elif isinstance(value, dict):
        for v in list(value.values())[:32]:
            out.extend(floating_tensors(v, depth + 1))
    return out


def flat(args: Any) -> list[Any]:
    from torch.utils._pytree import tree_leaves

    return tree_leaves(args)


def read(tensors: list[Any]) -> list[float]:
    """Values of 0-d/1-d tensors as floats: one stack and one ``tolist()`` per (device, dtype)."""
    out: list[float] = [0.0] * len(tensors)
    groups: dict[tuple, list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.device, t.dtype), []).append(i)
    for idx in groups.values():
        values = torch.stack([tensors[i] for i in idx]).tolist()
        for i, v in zip(idx, values, strict=True):
            out[i] = v
    return out


def reduce(t: Any) -> Any:
    """A 0-d sum of ``t`` (float32 accumulation), with no host sync; None when ``t`` cannot be reduced.

    The sum is 5x cheaper than ``aminmax`` on CPU and still tells the cases apart: NaN when a NaN (or
    both infinities) is present, +inf or -inf when only that one is. A finite tensor whose sum
    overflows float32 (values near 1e34) reads as +inf; a finding is only made after a precise check.
    """
    if not reducible(t):
        return None
    t = t.detach()
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.sum(dtype=torch.float32)
    return t.sum()


def reducible(t: Any) -> bool:
    if t.numel() == 0 or t.is_sparse or t.is_meta or t.is_complex():
        return False
    return not _is_wrapped(t)  # under vmap / grad transforms: no data to read


_functorch_wrapped: Any = None


def _is_wrapped(t: Any) -> bool:
    global _functorch_wrapped
    if _functorch_wrapped is None:
        functorch = getattr(torch._C, "_functorch", None)
        _functorch_wrapped = getattr(functorch, "is_functorch_wrapped_tensor", None) or (lambda _: False)
    return _functorch_wrapped(t)


def is_bad(x: Any) -> bool:
    return bool((torch.isnan(x) | torch.isposinf(x)).any())


def has_neginf(x: Any) -> bool:
    return bool(torch.isneginf(x).any())


def version(t: Any) -> int:
    """``t._version``; -1 for a tensor made under ``inference_mode``, which has no version counter (it
    never reaches a backward, so an in-place change of it does not matter here)."""
    try:
        return t._version
    except RuntimeError:  # "Inference tensors do not track version counter"
        return -1
