"""Static checks of PyTorch code. Never imports torch.

``lint_paths`` is the entry point: it finds the files, lints them in parallel processes (one parse and
one walk per file) and optionally writes safe fixes back.
"""

from __future__ import annotations

import gc
import os
import time
from dataclasses import dataclass, field

from torchpact.config import Config, Settings
from torchpact.findings import INPUT_CODE, Finding
from torchpact.lint.engine import FileResult, RuleSelection, lint_file
from torchpact.lint.files import discover, excluded_by
from torchpact.lint.project import FileSummary, ProjectFacts
from torchpact.lint.registry import all_rules, declared_codes

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

    @property
    def hidden(self) -> int:
        """Findings the preview gate kept out (lint/preview.py)."""
        return sum(r.hidden for r in self.files)


@dataclass
class FilePass:
    """One pass of a lint run over its files: whether fixes are made, the project's facts the rules may
    ask about (the second pass), and the rules each configuration enables, worked out once per pass
    (and per worker process)."""

    fix: bool
    project: ProjectFacts | None = None
    selection: RuleSelection = field(default_factory=RuleSelection)

    def lint(self, job: tuple[str, Config]) -> FileResult:
        result = lint_file(job[0], job[1], fix=self.fix, project=self.project, selection=self.selection)
        if not self.fix:
            result.original = None  # the file's text goes back to the parent only to be fixed or diffed
        result.fixes = []  # per-finding edits are for an editor's code actions, not for a run over files
        return result


# The pass a worker process runs: set by the pool's initializer in each worker, never in the parent
# (a fork-started worker begins with the parent's None). What a top-level function run by the pool
# can reach without pickling the pass, and its project facts, again for each chunk of files.
_worker_pass: FilePass | None = None


def _start_worker(file_pass: FilePass) -> None:
    global _worker_pass
    _worker_pass = file_pass


def _lint_in_worker(job: tuple[str, Config]) -> FileResult:
    assert _worker_pass is not None, "run by a pool whose initializer is _start_worker"
    return _worker_pass.lint(job)


def rule_codes() -> set[str]:
    """Every code lint can report: its rules' and the input problems'. Read from the rules'
    manifest, without importing them: a fully cached run imports no rule at all."""
    return declared_codes() | {INPUT_CODE, "TP002", "TP005"}


def _map(file_pass: FilePass, items: list[tuple[str, Config]], jobs: int) -> list[FileResult]:
    """``file_pass`` over ``items``, in order: in worker processes when there are enough of them."""
    if not items:
        return []  # nothing to lint: no pool, and no rule imported
    if jobs > 1 and len(items) >= PARALLEL_MIN_FILES:
        import multiprocessing  # here: a run of a few files starts no pool, and loads none of it
        from concurrent.futures import ProcessPoolExecutor

        all_rules()  # imported once here: forked workers inherit the modules instead of importing them each
        ctx = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
        # What is imported so far (the rules) goes to the GC's permanent generation: the collector
        # neither scans it again in the parent nor, after the fork, touches (and so copies) its
        # pages in each worker; about 8% of a cold run's CPU time.
        gc.freeze()
        try:
            with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_start_worker,
                                     initargs=(file_pass,)) as pool:
                return list(pool.map(_lint_in_worker, items, chunksize=max(1, len(items) // (jobs * 16))))
        finally:
            gc.unfreeze()
    return [file_pass.lint(job) for job in items]


def lint_stdin(data: bytes, path: str, config: Config, fix: bool = False) -> LintResult:
    """Lint ``data`` (standard input) as the file ``path`` (``--stdin-filename``: its configuration, its
    per-file ignores, a notebook when it ends in .ipynb); nothing is written."""
    start = time.perf_counter()
    result = lint_file(path, config, fix=fix, data=data)
    return LintResult(files=[result], seconds=time.perf_counter() - start)


def _code_fingerprint() -> str:
    """Changes with any change of torchpact's lint code, so a development checkout never reads a
    stale cache (released versions are covered by the version in the key as well)."""
    here = os.path.dirname(__file__)
    stats = []
    for folder, _, names in os.walk(here):
        for name in sorted(names):
            if name.endswith((".py", ".json")):  # the rules, and the precision that gates them
                st = os.stat(os.path.join(folder, name))
                stats.append(f"{folder}/{name}:{st.st_mtime_ns}:{st.st_size}")
    return ";".join(sorted(stats))


def lint_paths(paths: list[str] | None = None, config: Config | None = None, *, settings: Settings | None = None,
               fix: bool = False, jobs: int | None = None, write: bool = True, force_exclude: bool = False,
               cache: bool = False, cache_root: str = ".") -> LintResult:
    """Lint files and folders. Each file uses ``config`` when given, else its own configuration
    (``settings``; by default the closest pyproject.toml's, as on the command line, whose selectors the
    command line also checks against every known code). With ``fix``, safe fixes are applied (and
    written when ``write``).

    Each file is parsed once; its functions' facts (lint/project.py) are collected as it is linted.
    Files whose rules asked about a function of another file, and would now get a different answer,
    are linted again with the project's facts. With ``cache``, files whose content, configuration and
    torchpact code are unchanged take their findings, facts and questions from
    ``cache_root/.torchpact_cache`` (never with ``fix``)."""
    config_of = (settings or Settings()).for_path if config is None else (lambda path: config)
    start = time.perf_counter()
    files = list(discover(paths or ["."], excluded_by(config_of), force_exclude=force_exclude))
    configs = {p: config_of(p) for p in files}
    jobs = jobs or os.cpu_count() or 1
    store = None
    if cache and not fix:
        from torchpact.lint.cache import LintCache, hash_file, key  # here: --no-cache loads none of it

        store = LintCache(cache_root)

    results: dict[str, FileResult] = {}
    todo = files
    keys: dict[str, str] = {}
    if store is not None:
        fingerprint = _code_fingerprint()
        todo = []
        for p in files:
            digest = hash_file(p)
            keys[p] = key(digest, repr(configs[p]), fingerprint) if digest else ""
            entry = store.get(p)
            cached = store.findings(p, keys[p]) if keys[p] else None
            if cached is None:
                todo.append(p)
            else:
                results[p] = FileResult(path=p, findings=cached[0], lines=cached[1], hidden=cached[2],
                                        summary=entry.get("summary") or {},
                                        asked=[tuple(a) for a in entry.get("asked") or []])
    # _map returns one result per item, in order
    for p, r in zip(todo, _map(FilePass(fix), [(p, configs[p]) for p in todo], jobs), strict=True):
        results[p] = r
        # a rule that failed or ran out of time (TP002) may not next time: not cached
        if store is not None and keys[p] and not any(f.code == "TP002" for f in r.findings):
            store.put(p, key=keys[p], lines=r.lines, findings=[f.to_dict() for f in r.findings], hidden=r.hidden,
                      summary=r.summary, asked=[list(a) for a in r.asked])

    project = ProjectFacts([FileSummary.from_json(results[p].summary) for p in files if results[p].summary])
    again = [p for p in files if any(project.has(name, fact) for name, fact in results[p].asked)]
    if store is not None:
        # the second pass is cached too, under a key that also holds the project's facts
        for p in list(again):
            cached = store.findings(p, key(keys[p], project.fingerprint), field="with_facts") if keys[p] else None
            if cached is not None:
                results[p] = FileResult(path=p, findings=cached[0], lines=cached[1], hidden=cached[2])
                again.remove(p)
    for p, r in zip(again, _map(FilePass(fix, project), [(p, configs[p]) for p in again], jobs), strict=True):
        results[p] = r
        if store is not None and keys[p]:
            store.put(p, with_facts={"key": key(keys[p], project.fingerprint), "lines": r.lines,
                                     "findings": [f.to_dict() for f in r.findings], "hidden": r.hidden})
    if store is not None:
        store.save()
    ordered = [results[p] for p in files]
    if fix and write:
        for r in ordered:
            if r.fixed is not None:
                with open(r.path, "w", encoding="utf-8", newline="") as fh:
                    fh.write(r.fixed)
    return LintResult(files=ordered, seconds=time.perf_counter() - start)
