"""torchpact's lint rules inside flake8 (the ``TP`` codes), for projects whose checks run through flake8.

flake8 finds this checker through the ``flake8.extension`` entry point ``TP`` and hands it each file's
lines; lint then lints that text exactly as ``torchpact lint FILE`` would lint the file alone: the
file's closest ``pyproject.toml`` with ``[tool.torchpact]`` (select, ignore, per-file-ignores, preview
gate), and torchpact's own ``# noqa`` reading (flake8 reads ``# noqa`` as well). Select or ignore TP
codes in flake8 as any other (``--extend-ignore TP905``). Each message starts with the finding's
severity (``TP401 [info] ...``); flake8 fails on any reported finding, where ``torchpact lint`` fails on
warnings and errors only, so ``--torchpact-min-severity warning`` (or ``torchpact-min-severity`` in
flake8's configuration) leaves the ``info`` ones (advice, heuristics) out.

What it cannot do: flake8 checks each file alone, so the project's cross-file facts (a helper in
another module that zeroes gradients, lint/project.py) are unknown here; those facts only ever silence
findings, so flake8 may report a finding that ``torchpact lint`` of the whole project would not.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

from torchpact import __version__

_STDIN_NAMES = ("stdin", "-", "")


class TorchpactChecker:
    """A flake8 checker: one per file, ``run()`` yields ``(line, column, "TPnnn message", type)``."""

    name = "torchpact"
    version = __version__
    min_severity = "info"

    @classmethod
    def add_options(cls, parser: Any) -> None:
        parser.add_option("--torchpact-min-severity", default="info", choices=["info", "warning", "error"],
                          parse_from_config=True,
                          help="report torchpact findings at or above this severity (default: info, all of them)")

    @classmethod
    def parse_options(cls, options: Any) -> None:
        cls.min_severity = options.torchpact_min_severity

    def __init__(self, tree: ast.AST, filename: str, lines: list[str]) -> None:
        self.filename = filename
        self.lines = lines

    def run(self) -> Iterator[tuple[int, int, str, type[Any]]]:
        from torchpact.config import ConfigError, Settings
        from torchpact.findings import Severity
        from torchpact.lint.engine import lint_file

        path = "stdin.py" if self.filename in _STDIN_NAMES else self.filename
        try:
            config = Settings().for_path(path)
        except ConfigError as exc:
            yield 1, 0, f"TP001 torchpact cannot use its configuration, so nothing was checked: {exc}", type(self)
            return
        data = "".join(self.lines).encode("utf-8", "surrogatepass")
        floor = Severity(self.min_severity)
        for f in lint_file(path, config, data=data).findings:
            if f.severity < floor:
                continue
            message = f"{f.code} [{f.severity.value}] {f.message}" + (f" (fix: {f.fix})" if f.fix else "")
            yield f.line or 1, max((f.column or 1) - 1, 0), message, type(self)
