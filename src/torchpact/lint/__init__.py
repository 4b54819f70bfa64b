"""Static checks of PyTorch code. Never imports torch.

``lint_paths`` is the entry point: it finds the files, lints them in parallel processes (one parse and
one walk per file) and optionally writes safe fixes back.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from torchpact.config import Config, Settings
from torchpact.findings import INPUT_CODE, Finding
from torchpact.lint.engine import FileResult, lint_file
from torchpact.lint.files import discover, excluded_by

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


_WORKER_FIX = False


def _init_worker(fix: bool) -> None:
    global _WORKER_FIX
    _WORKER_FIX = fix
    from torchpact.lint.registry import all_rules

    all_rules()  # import the rules once per worker, not per file


def _lint_in_worker(job: tuple[str, Config]) -> FileResult:
    return lint_file(job[0], job[1], fix=_WORKER_FIX)


def rule_codes() -> set[str]:
    """Every code lint can report: its rules' and the input problems'."""
    from torchpact.lint.registry import all_rules

    return {r.code for r in all_rules()} | {INPUT_CODE, "TP002"}


def lint_paths(paths: list[str] | None = None, config: Config | None = None, *, settings: Settings | None = None,
               fix: bool = False, jobs: int | None = None, write: bool = True,
               force_exclude: bool = False) -> LintResult:
    """Lint files and folders. Each file uses ``config`` when given, else its own configuration
    (``settings``; by default the closest pyproject.toml's, as on the command line, whose selectors the
    command line also checks against every known code). With ``fix``, safe fixes are applied (and
    written when ``write``)."""
    config_of = (settings or Settings()).for_path if config is None else (lambda path: config)
    start = time.perf_counter()
    files = list(discover(paths or ["."], excluded_by(config_of), force_exclude=force_exclude))
    work = [(path, config_of(path)) for path in files]
    jobs = jobs or os.cpu_count() or 1
    if jobs > 1 and len(files) >= PARALLEL_MIN_FILES:
        ctx = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init_worker,
                                 initargs=(fix,)) as pool:
            results = list(pool.map(_lint_in_worker, work, chunksize=max(1, len(files) // (jobs * 16))))
    else:
        results = [lint_file(path, cfg, fix=fix) for path, cfg in work]
    if fix and write:
        for r in results:
            if r.fixed is not None:
                with open(r.path, "w", encoding="utf-8", newline="") as fh:
                    fh.write(r.fixed)
    return LintResult(files=results, seconds=time.perf_counter() - start)
