"""What watchers compute from the same tensors within one delivery of a step callback, kept for that
delivery only: the session empties it once every watcher has had the callback, so no tensor is held past
the hook that measured it (a gradient the script frees with ``zero_grad()`` is freed)."""

from __future__ import annotations

from typing import Any, NamedTuple


class GradNorms(NamedTuple):
    """The 2-norms of some gradients, measured once (see ``_batched.grad_norms``)."""

    position: dict[int, int]   # id of a gradient -> its position in ``grads``
    grads: list[Any]           # the very tensors measured (their ids alone could be reused)
    versions: list[Any]        # their version counters when measured: written in place since, measured again
    norms: Any                 # one vector of norms, in the order of ``grads``


class StepCache:
    """One slot per kind of shared result; None when nobody computed it in this delivery."""

    __slots__ = ("grad_norms",)

    def __init__(self) -> None:
        # read by nonfinite, grad_health and gradient_flow in the step pre-hook of a sampled step
        self.grad_norms: GradNorms | None = None

    def clear(self) -> None:
        self.grad_norms = None
