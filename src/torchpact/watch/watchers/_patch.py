"""Temporary wrappers around torch functions the global hooks cannot see (``nn.init``, clipping, ...).

Several watchers may wrap the same attribute, and they are removed in any order: each wrapper only
passes through once removed, and the original attribute is put back when the last wrapper of it is
gone, so a closed session leaves torch exactly as it found it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from torchpact.userframes import passes_through

_ORIGINALS: dict[tuple[int, str], tuple[Any, Any, list[Patch]]] = {}


class Patch:
    """``owner.attr`` replaced by ``make(original)``; ``remove()`` undoes it (idempotent).

    While Dynamo traces (``torch.compile``), the wrapper calls the original directly, so compiled
    graphs are the ones torch would build without torchpact.
    """

    def __init__(self, owner: Any, attr: str, make: Callable[[Callable], Callable]) -> None:
        key = (id(owner), attr)
        if key not in _ORIGINALS:
            _ORIGINALS[key] = (owner, owner.__dict__.get(attr, getattr(owner, attr)), [])
        self._key = key
        self.active = True
        previous = getattr(owner, attr)
        inner = make(previous)
        from torch.compiler import is_compiling

        @functools.wraps(previous)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.active and not is_compiling():  # Dynamo traces straight through to torch's own code
                return inner(*args, **kwargs)
            return previous(*args, **kwargs)

        passes_through(wrapper)
        passes_through(inner)
        _ORIGINALS[key][2].append(self)
        setattr(owner, attr, wrapper)

    def remove(self) -> None:
        if not self.active:
            return
        self.active = False
        entry = _ORIGINALS.get(self._key)
        if entry is not None and not any(p.active for p in entry[2]):
            owner, original, _ = _ORIGINALS.pop(self._key)
            setattr(owner, self._key[1], original)


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Every wrapper passes straight through inside (torchpact's own run of a model on the side)."""
    active = [p for entry in list(_ORIGINALS.values()) for p in entry[2] if p.active]
    for p in active:
        p.active = False
    try:
        yield
    finally:
        for p in active:
            p.active = True


def parameter_list(parameters: Any) -> list[Any]:
    """The ``parameters`` argument of a torch function that takes one tensor or an iterable of them, as a
    list: a generator (``model.parameters()``) can be read only once, by the wrapper or by the original."""
    import torch

    return [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)


def remove_all(patches: list[Patch]) -> None:
    while patches:
        patches.pop().remove()
