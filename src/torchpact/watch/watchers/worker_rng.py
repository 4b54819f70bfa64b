"""DataLoader workers whose dataset-owned random generators all start in the same state.

Each worker gets a copy of the dataset (fork or pickle). torch 2.13 seeds every worker's global
``random``, ``torch`` and NumPy generators differently, but a generator the dataset *owns*
(``self.rng = np.random.default_rng(0)``, a ``RandomState``, ``random.Random``, ``torch.Generator``)
is copied as is: every worker draws the same "random" augmentations (the bug behind
"A bug that plagues thousands of open-source ML projects", stackoverflow 67180955).

The iterator's start is wrapped so each worker, right after the script's own ``worker_init_fn``,
writes a fingerprint of those generators' states to a file; reading a state draws nothing, so the
workers produce exactly the same batches. The main process compares the fingerprints on sampled
steps and at the end (one directory listing while a loader is pending, nothing otherwise).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.frames import user_location
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers._patch import Patch, remove_all

_MAX_DEPTH = 2
_MAX_ATTRS = 64

SAME_WORKER_RNG = Check(
    code="TP550",
    category=Category.DATA,
    severity=Severity.WARNING,
    summary="A random generator owned by the dataset starts in the same state in every DataLoader worker.",
    doc="""## What it does
At runtime, when a `DataLoader` starts worker processes, each worker fingerprints the random
generators its copy of the dataset owns (NumPy `Generator` / `RandomState`, `random.Random`,
`torch.Generator`, also inside the dataset's transforms) right after the script's `worker_init_fn`.
When two workers hold a generator in exactly the same state, it reports the dataset, the attribute
and the line that iterates the loader. Reading a generator's state draws nothing, so the batches are
unchanged.

## Why is this bad?
Every worker receives a copy of the dataset. torch 2.13 re-seeds each worker's *global* `random`,
`torch` and NumPy generators, but not a generator object the dataset holds: all workers draw the
same sequence, so the "random" crops, flips or noise repeat across workers (with 4 workers, each
augmentation appears 4 times per epoch) and the data is far less varied than it looks.

## How to fix
Seed the dataset's generator per worker in a `worker_init_fn`:
`info = torch.utils.data.get_worker_info(); info.dataset.rng = np.random.default_rng(info.seed)`,
or draw from the global generators (`np.random`, `torch.rand`), which torch seeds per worker.""",
)


def _fingerprint(obj: Any) -> str | None:
    """A digest of a generator's state, or None when ``obj`` is not a generator."""
    import random

    state: Any = None
    try:
        if isinstance(obj, random.Random):
            state = obj.getstate()
        else:
            module = type(obj).__module__ or ""
            if module.startswith("numpy.random"):
                if hasattr(obj, "bit_generator"):
                    state = obj.bit_generator.state
                elif hasattr(obj, "get_state"):
                    state = obj.get_state(legacy=False)
            elif type(obj).__name__ == "Generator" and module.startswith("torch"):
                state = bytes(obj.get_state().numpy().tobytes())
    except Exception:  # a generator that cannot tell its state: not comparable
        return None
    if state is None:
        return None
    return hashlib.sha1(repr(state).encode() if not isinstance(state, bytes) else state).hexdigest()


def _generators(obj: Any, prefix: str, depth: int, seen: set[int], out: dict[str, str]) -> None:
    if id(obj) in seen or len(out) >= _MAX_ATTRS:
        return
    seen.add(id(obj))
    digest = _fingerprint(obj)
    if digest is not None:
        out[prefix] = digest
        return
    if depth >= _MAX_DEPTH:
        return
    if isinstance(obj, (list, tuple)):
        items = list(enumerate(obj))[:16]
        for i, item in items:
            _generators(item, f"{prefix}[{i}]", depth + 1, seen, out)
        return
    attrs = getattr(obj, "__dict__", None)
    if not isinstance(attrs, dict):
        return
    for name, value in list(attrs.items())[:_MAX_ATTRS]:
        if isinstance(value, (str, bytes, int, float, bool)) or value is None:
            continue
        if hasattr(value, "__array__") and not hasattr(value, "bit_generator"):
            continue  # data arrays / tensors
        _generators(value, f"{prefix}.{name}", depth + 1, seen, out)


class _FingerprintingInit:
    """The worker_init_fn handed to the workers: the script's own, then the fingerprint (picklable)."""

    def __init__(self, inner: Any, directory: str, loader_id: int) -> None:
        self.inner = inner
        self.directory = directory
        self.loader_id = loader_id

    def __call__(self, worker_id: int) -> None:
        if self.inner is not None:
            self.inner(worker_id)
        try:
            import torch.utils.data as data

            info = data.get_worker_info()
            found: dict[str, str] = {}
            _generators(info.dataset, "dataset", 0, set(), found)
            path = os.path.join(self.directory, f"{self.loader_id}-{worker_id}-{os.getpid()}.json")
            with open(path + ".tmp", "w") as f:
                json.dump(found, f)
            os.replace(path + ".tmp", path)
        except Exception:  # observing must never break a worker
            pass


class WorkerRng(Watcher):
    """TP550: dataset-owned generators identical in every DataLoader worker."""

    name = "worker_rng"
    checks = (SAME_WORKER_RNG,)
    sampled_only = frozenset({"on_step_pre"})

    def __init__(self) -> None:
        super().__init__()
        self._patches: list[Patch] = []
        self._dir: str | None = None
        self._pending: dict[int, tuple[str, tuple[str | None, int | None]]] = {}
        self._count = 0

    def attach(self, session: Any) -> None:
        super().attach(session)
        from torch.utils.data import dataloader

        self._patches.append(Patch(dataloader._MultiProcessingDataLoaderIter, "__init__", self._wrap_iter))

    def on_close(self) -> None:
        remove_all(self._patches)
        self._collect()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def on_step_pre(self, optimizer: Any) -> None:
        if self._pending and self.session.sampled:
            self._collect()

    def _wrap_iter(self, original: Any) -> Any:
        def __init__(iterator: Any, loader: Any) -> None:
            if self.session.closed or loader.num_workers < 2:
                return original(iterator, loader)
            if self._dir is None:
                self._dir = tempfile.mkdtemp(prefix="torchpact-workers-")
            self._count += 1
            self._pending[self._count] = (type(loader.dataset).__name__, user_location(2))
            inner = loader.worker_init_fn
            loader.worker_init_fn = _FingerprintingInit(inner, self._dir, self._count)
            try:
                return original(iterator, loader)
            finally:
                loader.worker_init_fn = inner
        return __init__

    def _collect(self) -> None:
        if not self._pending or self._dir is None:
            return
        by_loader: dict[int, list[dict[str, str]]] = {}
        try:
            names = os.listdir(self._dir)
        except OSError:
            return
        for name in names:
            if not name.endswith(".json"):
                continue
            try:
                with open(os.path.join(self._dir, name)) as f:
                    by_loader.setdefault(int(name.split("-")[0]), []).append(json.load(f))
            except (OSError, ValueError):
                continue
        for loader_id, prints in by_loader.items():
            if loader_id not in self._pending or len(prints) < 2:
                continue
            dataset, (path, line) = self._pending.pop(loader_id)
            shared = sorted(attr for attr in prints[0] if all(p.get(attr) == prints[0][attr] for p in prints[1:]))
            if not shared:
                continue
            attrs = ", ".join(f"`{a}`" for a in shared[:3])
            self.session.report(
                SAME_WORKER_RNG,
                f"{attrs} of {dataset} start in the same state in all {len(prints)} DataLoader workers checked: "
                "every worker draws the same random numbers, so the random augmentations repeat across workers",
                subject=f"{dataset}.{shared[0].split('.', 1)[-1]}", path=path, line=line, key=(dataset, shared[0]),
                fix="seed it per worker in worker_init_fn (info = torch.utils.data.get_worker_info(); "
                    "info.dataset.rng = np.random.default_rng(info.seed)) or use the global generators")
