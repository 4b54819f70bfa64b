"""The lint cache, like ruff's: a file whose content, configuration, torchpact version, rule set and
project facts are unchanged is not linted again; its findings come from ``.torchpact_cache/``.

The cache never breaks a run: a missing, corrupt or unwritable cache is no cache, silently.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from torchpact import __version__
from torchpact.findings import Finding

CACHE_DIR = ".torchpact_cache"


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def hash_file(path: str) -> str:
    """The content hash of a file; empty when it cannot be read (then it is not cached)."""
    try:
        with open(path, "rb") as fh:
            return content_hash(fh.read())
    except OSError:
        return ""


def key(*parts: str) -> str:
    """One cache key from the file's content hash and everything else its findings depend on."""
    return hashlib.sha256("\0".join((__version__, *parts)).encode()).hexdigest()


class LintCache:
    """Entries by file path: ``{"hash": content, "summary": {...}, "key": ..., "findings": [...]}``."""

    def __init__(self, root: str | os.PathLike[str] = "."):
        self.file = Path(root) / CACHE_DIR / f"lint-{__version__}.json"
        self.entries: dict[str, dict[str, Any]] = {}
        self.dirty = False
        try:
            with open(self.file, encoding="utf-8") as fh:
                data = json.load(fh)
            if isinstance(data, dict):
                self.entries = {k: v for k, v in data.items() if isinstance(v, dict)}
        except (OSError, ValueError):
            pass

    def get(self, path: str) -> dict[str, Any]:
        return self.entries.get(path) or {}

    def findings(self, path: str, file_key: str, field: str | None = None) -> tuple[list[Finding], int, int] | None:
        """The cached findings (and line count, and the number the preview gate hid) of ``path`` when
        its key matches, else None; ``field`` names a nested entry (the findings of a second pass)."""
        entry = self.entries.get(path)
        if entry and field is not None:
            entry = entry.get(field)
        if not isinstance(entry, dict) or entry.get("key") != file_key:
            return None
        try:
            return ([Finding.from_dict(f) for f in entry["findings"]], int(entry.get("lines", 0)),
                    int(entry.get("hidden", 0)))
        except (KeyError, TypeError, ValueError):
            return None

    def put(self, path: str, **entry: Any) -> None:
        self.entries[path] = {**self.entries.get(path, {}), **entry}
        self.dirty = True

    def save(self) -> None:
        """Write atomically; any failure (read-only tree, full disk) leaves the run as it was."""
        if not self.dirty:
            return
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            gitignore = self.file.parent / ".gitignore"
            if not gitignore.exists():
                gitignore.write_text("# created by torchpact\n*\n", encoding="utf-8")
            fd, tmp = tempfile.mkstemp(dir=self.file.parent, prefix=".lint-", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump(self.entries, fh, separators=(",", ":"))
                os.replace(tmp, self.file)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError:
            pass
