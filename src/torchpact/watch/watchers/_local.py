"""This rank's own data of a parameter: a sharded DTensor (FSDP2, tensor parallel) as its local shard.

Watchers read parameters on sampled steps; an op on a DTensor would run a collective (a norm
all-reduces, a reshape may all-gather), which an observer must never add.
"""

from __future__ import annotations

from typing import Any


def local(t: Any) -> Any:
    """``t.to_local()`` for a DTensor (or a Parameter wrapping one), else ``t`` itself, detached."""
    t = t.detach()
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def real_view(t: Any) -> Any:
    """A complex tensor as its real view (one more dimension of 2: real and imaginary parts), so that max,
    segment reductions and comparisons apply; any other tensor as it is. No copy."""
    if t.is_complex():
        import torch

        return torch.view_as_real(t)
    return t


def dense_grads(optimizer: Any) -> tuple[list[Any], list[Any]]:
    """The optimizer's parameters that have a dense, local gradient, and those gradients: sparse ones and
    sharded DTensor ones are left out (a local norm is not the parameter's norm)."""
    import torch

    params, grads = [], []
    for group in optimizer.param_groups:
        for p in group["params"]:
            g = p.grad
            if g is None or g.is_sparse or (type(g) is not torch.Tensor and hasattr(g, "to_local")):
                continue
            params.append(p)
            grads.append(g)
    return params, grads
