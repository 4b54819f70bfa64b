"""Which dataset fed the step that just ended: the DataLoader pass that drew a batch most recently.

Each DataLoader iterator is noted when torch builds it (``iter(loader)``; a persistent-worker iterator is
built once and reset for each pass); one whose ``_num_yielded`` moved since the last look yielded batches
in between. When several did (an evaluation pass between two steps), the one built last is the pass the
step's batch came from: an evaluation loop run before it has ended. Costs one wrapper call per
``iter(loader)`` and a look at a few iterators per step.
"""

from __future__ import annotations

import weakref
from typing import Any

from torchpact.watch.watchers._patch import Patch

_KEPT = 8   # iterators followed at once (a training loader, a validation loader, a few more)


class DatasetsFed:
    """``feeding()``: the dataset (a weak reference, or its id if it takes none) of the pass that drew a
    batch most recently since the previous call, None if no DataLoader did."""

    def __init__(self) -> None:
        self._live: list[list] = []   # [iterator ref, dataset ref-or-id, batches yielded at the last look]
        self._patch: Patch | None = None

    def install(self) -> None:
        from torch.utils.data import dataloader

        self._patch = Patch(dataloader._BaseDataLoaderIter, "__init__", self._wrap)

    def remove(self) -> None:
        if self._patch is not None:
            self._patch.remove()
            self._patch = None
        self._live = []

    def _wrap(self, original: Any) -> Any:
        def __init__(iterator: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
            original(iterator, loader, *args, **kwargs)
            if self._patch is not None:
                dataset = getattr(loader, "dataset", None)
                try:
                    key: Any = weakref.ref(dataset)
                except TypeError:
                    key = id(dataset)
                live = [e for e in self._live if e[0]() is not None]
                self._live = [*live[-(_KEPT - 1):], [weakref.ref(iterator), key, 0]]
        return __init__

    def feeding(self) -> Any:
        out = None
        for entry in self._live:   # in the order they were built
            iterator = entry[0]()
            n = getattr(iterator, "_num_yielded", entry[2]) if iterator is not None else entry[2]
            if n != entry[2]:
                entry[2] = n
                out = entry[1]
        return out


def same_dataset(a: Any, b: Any) -> bool:
    """Whether two answers of ``feeding()`` name one same live dataset (an id may be reused once freed)."""
    if isinstance(a, weakref.ref) and isinstance(b, weakref.ref):
        x = a()
        return x is not None and x is b()
    return a == b
