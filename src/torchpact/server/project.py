"""The project facts the language server lints with: the functions of every file under the workspace
folders (``lint/project.py``: a helper that zeroes gradients, calls ``set_epoch``...), as ``torchpact
lint`` of those folders would collect them. A file open in the editor counts with its unsaved text; the
others with what is on disk, read from lint's cache (``.torchpact_cache``) where it holds the file's
current content, else summarised here.

When a summary changes, the facts are merged again; the documents whose rules asked a question whose
answer changed are linted again (``changed_answers``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from torchpact.config import Config, ConfigError, Settings
from torchpact.lint.project import FileSummary, ProjectFacts, mentions_facts, summarize


def _summary_from_disk(path: str) -> dict:
    from torchpact.lint.source import SourceError, read_source

    try:
        text = read_source(path).text
    except SourceError:
        return {}
    return summarize(text).to_json() if mentions_facts(text) else {}


class CachedSummaries:
    """Summaries from one folder's lint cache, for files whose content, configuration and torchpact code
    match the cache's key (the key ``lint_paths`` wrote); anything else is summarised again."""

    def __init__(self, root: str, config_of: Callable[[str], Config]):
        from torchpact.lint import _code_fingerprint
        from torchpact.lint.cache import CACHE_DIR, LintCache

        self.root = root
        self.store = LintCache(root) if os.path.isdir(os.path.join(root, CACHE_DIR)) else None
        self.fingerprint = _code_fingerprint() if self.store is not None else ""
        self.config_of = config_of

    def get(self, path: str) -> dict | None:
        if self.store is None:
            return None
        from torchpact.lint.cache import hash_file, key

        rel = os.path.relpath(path, self.root)
        entry = self.store.get(rel) or self.store.get(path)
        if not entry or "key" not in entry:
            return None
        digest = hash_file(path)
        if not digest or entry["key"] != key(digest, repr(self.config_of(path)), self.fingerprint):
            return None
        return entry.get("summary") or {}


def scan(roots: Iterable[str], settings: Settings | None = None) -> dict[str, dict]:
    """Every lintable file under ``roots`` (as ``torchpact lint ROOT`` would find them) -> its summary.
    Runs in the server's background thread: its own Settings, nothing shared."""
    from torchpact.lint.files import discover, excluded_by

    settings = settings or Settings()

    def config_of(path: str) -> Config:
        try:
            return settings.for_path(path)
        except ConfigError:
            return Config()  # its documents say what is wrong; its files' facts still count

    out: dict[str, dict] = {}
    for root in roots:
        if not os.path.isdir(root):
            continue
        cached = CachedSummaries(root, config_of)
        for path in discover([root], excluded_by(config_of)):
            path = os.path.abspath(path)
            summary = cached.get(path)
            out[path] = _summary_from_disk(path) if summary is None else summary
    return out


class ProjectIndex:
    """Summaries by absolute path (the editor's text over the disk's) and the facts merged from them."""

    def __init__(self) -> None:
        self.disk: dict[str, dict] = {}
        self.edited: dict[str, dict] = {}
        self.facts = ProjectFacts()

    def _merge(self) -> ProjectFacts | None:
        """Merge again; the previous facts when they changed, else None."""
        summaries = {**self.disk, **self.edited}
        new = ProjectFacts([FileSummary.from_json(s) for s in summaries.values() if s])
        if new.functions == self.facts.functions:
            return None
        old, self.facts = self.facts, new
        return old

    def load(self, summaries: dict[str, dict]) -> ProjectFacts | None:
        """The background scan's summaries of the files on disk."""
        self.disk.update(summaries)
        return self._merge()

    def edit(self, path: str, summary: dict) -> ProjectFacts | None:
        """An open document's summary from its latest lint. Merging every file's summaries again costs
        tens of milliseconds on a large workspace, and typing changes a summary's calls at almost every
        key (``res`` on the way to ``reset(``): a change that cannot alter any fact is kept unmerged."""
        path = os.path.abspath(path)
        before = self.edited[path] if path in self.edited else self.disk.get(path, {})
        self.edited[path] = summary
        if not _may_alter_facts(before, summary, self.facts):
            return None
        return self._merge()

    def close(self, path: str) -> ProjectFacts | None:
        """A document closed: its file counts as on disk again."""
        path = os.path.abspath(path)
        if self.edited.pop(path, None) is None:
            return None
        if os.path.isfile(path):
            self.disk[path] = _summary_from_disk(path)
        return self._merge()

    def on_disk(self, path: str, deleted: bool = False) -> ProjectFacts | None:
        """A file changed, appeared or went away on disk (the client's file watcher)."""
        path = os.path.abspath(path)
        if deleted:
            self.disk.pop(path, None)
        else:
            self.disk[path] = _summary_from_disk(path)
        return None if path in self.edited else self._merge()


def _edges(summary: dict) -> set[tuple[str, str]]:
    return {(fn, callee) for fn, callees in (summary.get("calls") or {}).items() for callee in callees}


def _may_alter_facts(before: dict, after: dict, facts: ProjectFacts) -> bool:
    """Whether replacing one file's summary ``before`` with ``after`` can change the merged facts: its own
    facts changed, or a call to a function that has facts was added or removed. A call to a function
    without facts carries none, in any round of the propagation, so adding or removing it changes nothing."""
    if (before.get("facts") or {}) != (after.get("facts") or {}):
        return True
    return any(callee in facts.functions for _, callee in _edges(before) ^ _edges(after))


def changed_answers(asked: Iterable[tuple[str, str]] | Iterable[list[str]], old: ProjectFacts,
                    new: ProjectFacts) -> bool:
    """Whether any question a document's rules asked the project is answered otherwise now."""
    return any(old.has(name, fact) != new.has(name, fact) for name, fact in asked)
