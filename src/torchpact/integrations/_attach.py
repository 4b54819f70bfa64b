"""What both callbacks share: a watch session around a fit, the findings handed over, a report written."""

from __future__ import annotations

import sys
import time
from typing import Any, Iterable

from torchpact.findings import Finding
from torchpact.watch.session import Sampler


class WatchedFit:
    """Starts the watchers when a fit begins and closes them when it ends (or fails).

    ``report``: a file to write the report to in ``format`` (json, sarif, github, text);
    ``html``: a file for the self-contained HTML page. ``live``: print each finding when first seen.
    """

    def __init__(self, watchers: Iterable[str] | None = None, *, report: str | None = None, format: str = "json",
                 html: str | None = None, live: bool = True, sample_first: int = Sampler().first,
                 sample_every: int = Sampler().every, command: str = "fit") -> None:
        from torchpact.report import FORMATS

        if format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {format!r}")
        self.watchers = list(watchers) if watchers is not None else None
        self.report, self.format, self.html, self.live = report, format, html, live
        self.sample_first, self.sample_every = sample_first, sample_every
        self.command = command
        self.findings: list[Finding] = []
        self.data: dict[str, Any] = {}
        self.steps = 0
        self.session: Any = None
        self._started = 0.0

    @property
    def active(self) -> bool:
        return self.session is not None

    def start(self, rank: int | None = None) -> None:
        from torchpact.watch import watch

        self.stop()  # a previous fit that never reached its end hook
        self.findings, self.data, self.steps = [], {}, 0
        self.session = watch(self.watchers, sampler=Sampler(self.sample_first, self.sample_every), live=self.live,
                             rank=rank)
        self._started = time.perf_counter()
        self.session.start()

    def stop(self, error: BaseException | None = None) -> list[Finding]:
        """Remove every hook, collect the findings and data, write the reports. Safe to call twice."""
        session, self.session = self.session, None
        if session is None:
            return self.findings
        session.close()
        self.findings = sorted(session.findings, key=lambda f: (f.step if f.step is not None else -1, f.code))
        self.data = session.data()
        self.steps = session.step
        if self.report or self.html:
            self._write(time.perf_counter() - self._started, error)
        return self.findings

    def _write(self, seconds: float, error: BaseException | None) -> None:
        import torch

        from torchpact.report import render

        meta: dict[str, Any] = {
            "command": self.command, "torch": torch.__version__,
            "summary": {"steps": self.steps, "seconds": round(seconds, 3),
                        "error": f"{type(error).__name__}: {error}"[:1000] if error is not None else None,
                        "data": self.data},
        }
        if self.format == "sarif" or self.html:  # SARIF's rule table, the page's Rules section
            from torchpact.docs import rule_table

            meta["rules"] = rule_table(include_runtime=True)
        for path, fmt in ((self.report, self.format), (self.html, "html")):
            if not path:
                continue
            try:
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(render(fmt, self.findings, meta))
            except OSError as exc:  # a report that cannot be written must not fail the user's training
                print(f"torchpact: cannot write {path}: {exc}", file=sys.stderr)


class FitCallback:
    """What both frameworks' callbacks share: their options, the watched fit, the findings and data handed
    over. A callback class puts this before its framework's base class and names its ``command``."""

    command = "fit"

    def __init__(self, watchers: Iterable[str] | None = None, *, report: str | None = None, format: str = "json",
                 html: str | None = None, live: bool = True, sample_first: int = Sampler().first,
                 sample_every: int = Sampler().every) -> None:
        super().__init__()
        self.fit = WatchedFit(watchers, report=report, format=format, html=html, live=live,
                              sample_first=sample_first, sample_every=sample_every, command=self.command)

    @property
    def findings(self) -> list[Finding]:
        return self.fit.findings

    @property
    def data(self) -> dict[str, Any]:
        return self.fit.data
