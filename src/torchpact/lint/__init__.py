"""Static checks of PyTorch code. Never imports torch.

``lint_paths`` is the entry point: it finds the files, lints them in parallel processes (one parse and
one walk per file) and optionally writes safe fixes back.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
import multiprocessing

from torchpact.config import Config
from torchpact.findings import Finding
from torchpact.lint.engine import FileResult, lint_file
from torchpact.lint.files import discover

# Below this many files a process pool costs more than it saves.
PARALLEL_MIN_FILES = 24


@dataclass
class LintResult:
    """All files' results, plus totals for summaries and benchmarks."""

    files: list[FileResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def findings(self) -> list[Finding]:
        out = [f for r in self.files for f in r.findings]
        out.sort(key=Finding.sort_key)
        return out

    @property
    def lines(self) -> int:
        return sum(r.lines for r in self.files)

    @property
    def fixes_applied(self) -> int:
        return sum(r.fixes_applied for r in self.files)


_WORKER_CONFIG: Config | None = None
_WORKER_FIX = False


def _init_worker(config: Config, fix: bool) -> None:
    global _WORKER_CONFIG, _WORKER_FIX
    _WORKER_CONFIG, _WORKER_FIX = config, fix
    from torchpact.lint.registry import all_rules

    all_rules()  # import the rules once per worker, not per file


def _lint_in_worker(path: str) -> FileResult:
    assert _WORKER_CONFIG is not None
    return lint_file(path, _WORKER_CONFIG, fix=_WORKER_FIX)


def lint_paths(paths: list[str] | None = None, config: Config | None = None, *, fix: bool = False,
               jobs: int | None = None, write: bool = True) -> LintResult:
    """Lint files and folders. With ``fix``, safe fixes are applied (and written when ``write``)."""
    config = config or Config()
    start = time.perf_counter()
    files = list(discover(paths or ["."], config.exclude))
    jobs = jobs or os.cpu_count() or 1
    if jobs > 1 and len(files) >= PARALLEL_MIN_FILES:
        ctx = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init_worker,
                                 initargs=(config, fix)) as pool:
            results = list(pool.map(_lint_in_worker, files, chunksize=max(1, len(files) // (jobs * 16))))
    else:
        results = [lint_file(p, config, fix=fix) for p in files]
    if fix and write:
        for r in results:
            if r.fixed is not None:
                with open(r.path, "w", encoding="utf-8", newline="") as fh:
                    fh.write(r.fixed)
    return LintResult(files=results, seconds=time.perf_counter() - start)
