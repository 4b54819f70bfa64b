"""Running a model once more, on the side, without the script or the other watchers noticing.

A probe forward (``causal_leak``) must leave training bit-for-bit as it was: it runs on a copy of the
model that shares the parameters (detached, read only) and clones the buffers, whose calls go straight
to ``forward`` (no hook of torch, of the script or of the session runs), under ``no_grad``, with every
random generator it could draw from (torch's CPU and CUDA ones, Python's ``random``, NumPy's global one)
restored afterwards, and with every wrapper torchpact set on torch functions (``_patch``) passing
straight through while it runs.
"""

from __future__ import annotations

import contextlib
import random
import sys
from typing import Any, Iterator

from torchpact.watch.watchers import _patch


class NotCopyable(Exception):
    """The model cannot be run on the side faithfully."""


def private_copy(module: Any, memo: dict[int, Any] | None = None) -> Any:
    """A copy of ``module`` sharing no buffer with it, whose calls bypass every hook; parameters are shared
    (detached), other attributes are the original's."""
    memo = {} if memo is None else memo
    if id(module) in memo:
        return memo[id(module)]
    if "forward" in vars(module):
        raise NotCopyable("forward replaced on the instance")  # bound to the original
    new = type(module).__new__(type(module))
    new.__dict__.update(vars(module))
    memo[id(module)] = new
    new._parameters = {k: (None if p is None else p.detach()) for k, p in module._parameters.items()}
    new._buffers = {k: (None if b is None else b.detach().clone()) for k, b in module._buffers.items()}
    new._modules = {k: (None if m is None else private_copy(m, memo)) for k, m in module._modules.items()}
    # Module.__call__ goes straight to _compiled_call_impl when it is set: no global or module hook runs.
    new.__dict__["_compiled_call_impl"] = new.forward
    return new


def set_eval(copy: Any) -> None:
    """Eval mode on a private copy (its ``__dict__`` is its own): the original keeps its mode."""
    seen: set[int] = set()
    stack = [copy]
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        m.__dict__["training"] = False
        stack.extend(c for c in m._modules.values() if c is not None)


@contextlib.contextmanager
def unobserved(devices: list[int]) -> Iterator[Any]:
    """No grad, torchpact's wrappers passing through, and every random generator restored on exit.
    Yields a function that puts the generators back as they were on entry (to run twice alike)."""
    import torch

    with torch.random.fork_rng(devices=devices), torch.no_grad(), host_generators_kept() as rewind_host, \
            _patch.suspended():
        cpu = torch.get_rng_state()
        cuda = [torch.cuda.get_rng_state(d) for d in devices]

        def rewind() -> None:
            torch.set_rng_state(cpu)
            for d, s in zip(devices, cuda, strict=True):
                torch.cuda.set_rng_state(s, d)
            rewind_host()

        yield rewind


@contextlib.contextmanager
def host_generators_kept() -> Iterator[Any]:
    """Python's ``random`` and NumPy's global generator restored on exit. Yields a function that puts them
    back as they were on entry."""
    numpy = sys.modules.get("numpy")
    py_state = random.getstate()
    np_state = numpy.random.get_state() if numpy is not None else None

    def rewind() -> None:
        random.setstate(py_state)
        if numpy is not None:
            numpy.random.set_state(np_state)

    try:
        yield rewind
    finally:
        rewind()
