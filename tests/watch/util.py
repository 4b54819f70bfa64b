"""Helpers for watcher tests: run a real training function or script under chosen watchers."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Callable, Iterable

from torchpact.findings import Finding
from torchpact.launch.single import RunOutcome, run_script
from torchpact.watch import Sampler, watch


def watched(fn: Callable[[], object], watchers: Iterable[str] | None = None,
            sampler: Sampler | None = None) -> list[Finding]:
    """Findings of running ``fn()`` under the named watchers (all default ones when None)."""
    with watch(watchers, sampler=sampler) as session:
        fn()
    return session.findings


def run_source(tmp_path: Path, source: str, watchers: Iterable[str] | None = None,
               args: Iterable[str] = (), sampler: Sampler | None = None, name: str = "train.py") -> RunOutcome:
    """Write ``source`` to a script in ``tmp_path`` and run it as ``torchpact run`` would."""
    script = tmp_path / name
    script.write_text(textwrap.dedent(source))
    return run_script(str(script), list(args), watchers=watchers, sampler=sampler, live=False)


def codes(findings: Iterable[Finding]) -> list[str]:
    return sorted(f.code for f in findings)
