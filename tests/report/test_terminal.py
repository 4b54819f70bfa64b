"""The terminal report: rich, grouped and coloured on a TTY; the plain format for pipes and under NO_COLOR."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from torchpact.findings import Category, Finding, Severity, with_relative_paths
from torchpact.report import render
from torchpact.report.terminal import render_terminal
from torchpact.report.text import render_text, use_color

ROOT = Path(__file__).resolve().parents[2]
LEAKY = ROOT / "tests" / "fixtures" / "leaky_train.py"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _findings(path: Path) -> list[Finding]:
    return [
        Finding("TP101", Category.MEMORY, Severity.ERROR, "a graph is kept alive", path=str(path), line=14,
                column=5, subject="total", fix="accumulate `loss.detach()`", step=3),
        Finding("TP912", Category.PERFORMANCE, Severity.INFO, "18 reads per step", fix="read less often"),
        Finding("TP402", Category.TRAINING, Severity.WARNING, "eval mode while training", path=str(path), line=11,
                extra={"ranks": [0, 1]}),
    ]


def test_rich_report_groups_colours_and_shows_source_and_fix():
    out = render_terminal(_findings(LEAKY), {"footer": ["10 steps"]}, width=100)
    assert ANSI.search(out)
    plain = ANSI.sub("", out)
    heads = [line.split("·")[0].strip() for line in plain.splitlines() if "·" in line and "─" in line]
    assert heads == ["memory", "training", "performance"]  # worst severity first
    assert "TP101" in plain and f"{LEAKY}:14:5" in plain and "[step 3]" in plain and "[ranks 0,1]" in plain
    assert "total += loss" in plain and "❱" in plain  # the source line, marked
    assert "fix accumulate `loss.detach()`" in plain
    assert "Found 3 findings: 1 error, 1 warning, 1 info." in plain and plain.rstrip().endswith("10 steps")
    assert "<unknown>" not in plain and " INFO  TP912" in plain


def test_text_format_is_plain_without_a_terminal():
    findings = _findings(LEAKY)
    plain = render_text(with_relative_paths(findings), {})  # render() reports paths as every format does
    assert render("text", findings, {"color": False}) == plain
    assert not ANSI.search(render("text", findings, {"color": False}))
    assert ANSI.search(render("text", findings, {"color": True}))


class _Tty:
    def isatty(self) -> bool:
        return True


def test_no_color_turns_colour_off(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_color(_Tty())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_color(_Tty())


def _under_pty(args: list[str], env: dict[str, str]) -> str:
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "torchpact", *args], stdout=slave, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, env=env, cwd=ROOT)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
def test_lint_on_a_terminal_and_under_no_color(tmp_path):
    target = tmp_path / "train.py"
    target.write_text(LEAKY.read_text())
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"} | {"COLUMNS": "100"}
    tty = _under_pty(["lint", "--preview", str(target)], env)
    assert ANSI.search(tty) and "memory · 1" in ANSI.sub("", tty)
    plain = _under_pty(["lint", "--preview", str(target)], env | {"NO_COLOR": "1"})
    assert not ANSI.search(plain)
    assert f"{target}:14:5: TP101 error" in plain and "   14 |     total += loss" in plain.replace("\r\n", "\n")


def _notebook(tmp_path: Path) -> Path:
    import json

    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# notes"]},
             {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
              "source": ["import torch\n", "x = torch.range(0, 3)\n"]}]
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_a_notebook_finding_shows_its_cells_line_in_both_reports(tmp_path):
    path = _notebook(tmp_path)
    # lint's finding: cell 2 (markdown counts), line 2 of that cell, column 5
    found = [Finding("TP313", Category.NUMERICS, Severity.WARNING, "torch.range is deprecated", path=str(path),
                     cell=2, line=2, column=5, end_line=2, end_column=16)]
    plain = render_text(found, {})
    assert "    2 | x = torch.range(0, 3)\n      |     ^^^^^^^^^^^\n" in plain, plain
    rich = ANSI.sub("", render_terminal(found, {}, width=100))
    assert "x = torch.range(0, 3)" in rich and "import torch" in rich, rich
