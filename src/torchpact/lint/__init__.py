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
from torchpact.lint.cache import LintCache, content_hash, key
from torchpact.lint.engine import FileResult, lint_file
from torchpact.lint.files import discover
from torchpact.lint.project import FileSummary, ProjectFacts, summarize
from torchpact.lint.source import SourceError, read_source

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
_WORKER_PROJECT: ProjectFacts | None = None


def _init_worker(config: Config, fix: bool, project: ProjectFacts | None = None) -> None:
    global _WORKER_CONFIG, _WORKER_FIX, _WORKER_PROJECT
    _WORKER_CONFIG, _WORKER_FIX, _WORKER_PROJECT = config, fix, project
    from torchpact.lint.registry import all_rules

    all_rules()  # import the rules once per worker, not per file


def _lint_in_worker(path: str) -> FileResult:
    assert _WORKER_CONFIG is not None
    return lint_file(path, _WORKER_CONFIG, fix=_WORKER_FIX, project=_WORKER_PROJECT)


def _summarize_file(path: str) -> tuple[str, dict]:
    """(content hash, function summary) of one file; an unreadable file has neither."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return "", {}
    try:
        text = read_source(path).text if path.endswith(".ipynb") else data.decode("utf-8")
    except (SourceError, UnicodeDecodeError):
        return content_hash(data), {}
    return content_hash(data), summarize(text).to_json()


def _hash_file(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return content_hash(fh.read())
    except OSError:
        return ""


def _map(fn, items: list[str], jobs: int, initargs: tuple | None = None, initializer=None) -> list:
    if jobs > 1 and len(items) >= PARALLEL_MIN_FILES:
        ctx = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=initializer,
                                 initargs=initargs or ()) as pool:
            return list(pool.map(fn, items, chunksize=max(1, len(items) // (jobs * 16))))
    if initializer is not None:
        initializer(*(initargs or ()))
    return [fn(p) for p in items]


def _code_fingerprint() -> str:
    """Changes with any change of torchpact's lint code, so a development checkout never reads a
    stale cache (released versions are covered by the version in the key as well)."""
    here = os.path.dirname(__file__)
    stats = []
    for folder, _, names in os.walk(here):
        for name in sorted(names):
            if name.endswith(".py"):
                st = os.stat(os.path.join(folder, name))
                stats.append(f"{folder}/{name}:{st.st_mtime_ns}:{st.st_size}")
    return ";".join(sorted(stats))


def lint_paths(paths: list[str] | None = None, config: Config | None = None, *, fix: bool = False,
               jobs: int | None = None, write: bool = True, cache: bool = False,
               cache_root: str = ".") -> LintResult:
    """Lint files and folders. With ``fix``, safe fixes are applied (and written when ``write``).

    One pass summarises every file's functions for the rules that look across files
    (lint/project.py); then each file is linted. With ``cache``, files whose content, configuration
    and project facts are unchanged take their findings from ``cache_root/.torchpact_cache`` (never
    with ``fix``)."""
    config = config or Config()
    start = time.perf_counter()
    files = list(discover(paths or ["."], config.exclude))
    jobs = jobs or os.cpu_count() or 1
    store = LintCache(cache_root) if cache and not fix else None

    hashes: dict[str, str] = {}
    summaries: dict[str, FileSummary] = {}
    misses = files
    if store is not None:
        hashes = {p: _hash_file(p) for p in files}
        misses = []
        for p in files:
            entry = store.get(p)
            if hashes[p] and entry.get("hash") == hashes[p] and isinstance(entry.get("summary"), dict):
                summaries[p] = FileSummary.from_json(entry["summary"])
            else:
                misses.append(p)
    for p, (digest, summary) in zip(misses, _map(_summarize_file, misses, jobs)):
        hashes[p] = digest
        summaries[p] = FileSummary.from_json(summary)
        if store is not None:
            store.put(p, hash=digest, summary=summary)
    project = ProjectFacts([summaries[p] for p in files])

    results: dict[str, FileResult] = {}
    todo = files
    keys: dict[str, str] = {}
    if store is not None:
        salt = (repr(config), project.fingerprint, _code_fingerprint())
        todo = []
        for p in files:
            keys[p] = key(hashes[p], *salt)
            cached = store.findings(p, keys[p]) if hashes[p] else None
            if cached is None:
                todo.append(p)
            else:
                results[p] = FileResult(path=p, findings=cached[0], lines=cached[1])
    for p, r in zip(todo, _map(_lint_in_worker, todo, jobs, (config, fix, project), _init_worker)):
        results[p] = r
        if store is not None and hashes[p]:
            store.put(p, key=keys[p], lines=r.lines, findings=[f.to_dict() for f in r.findings])
    if store is not None:
        store.save()
    ordered = [results[p] for p in files]
    if fix and write:
        for r in ordered:
            if r.fixed is not None:
                with open(r.path, "w", encoding="utf-8", newline="") as fh:
                    fh.write(r.fixed)
    return LintResult(files=ordered, seconds=time.perf_counter() - start)
