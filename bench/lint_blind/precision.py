"""Precision of torchpact lint from a blind round's verdicts (issue 30).

A verdicts CSV has the columns project,path,line,code,severity,verdict,reason with verdict one of
true / false / debatable. This prints two Markdown tables: per severity and per (code, severity),
each with the number of findings the round reported (read from the round's findings CSV when it is
there), how many were judged, the verdict counts, and two precisions: true / judged (debatable
counts against) and true / (true + false) (debatable left out).

    python bench/lint_blind/precision.py --round 1
    python bench/lint_blind/precision.py path/to/verdicts.csv [--findings path/to/findings.csv]
    python bench/lint_blind/precision.py --round 3 --within round3_default_findings.csv

``--within FINDINGS`` restricts both the findings and the verdicts to the rows of FINDINGS (matched on
project, path, line, code and severity): the precision of a subset, such as the default rule set's findings.

Standard library only.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
VERDICTS = ("true", "false", "debatable")
SEVERITIES = ("error", "warning", "info")
COLUMNS = ("project", "path", "line", "code", "severity", "verdict", "reason")


class BadInput(Exception):
    """A verdicts or findings file that cannot be read as such; its text is the one-line message."""


def read_verdicts(path: Path) -> list[dict[str, str]]:
    rows = _read_csv(path)
    if rows and not set(COLUMNS) <= set(rows[0]):
        raise BadInput(f"{path}: expected the columns {','.join(COLUMNS)}")
    for number, row in enumerate(rows, start=2):
        if row["verdict"] not in VERDICTS:
            raise BadInput(f"{path}:{number}: verdict {row['verdict']!r} is not one of {', '.join(VERDICTS)}")
    return rows


def read_findings(path: Path) -> list[dict[str, str]]:
    rows = _read_csv(path)
    if rows and not {"code", "severity"} <= set(rows[0]):
        raise BadInput(f"{path}: expected at least the columns code,severity")
    return rows


def finding_key(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(row.get(c, "") for c in ("project", "path", "line", "code", "severity"))


def _read_csv(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror}") from None
    except (csv.Error, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: not a readable CSV ({e})") from None


def tally(verdicts: list[dict[str, str]], findings: list[dict[str, str]] | None, key) -> dict:
    """Per group (``key(row)``): reported findings (None without a findings file) and verdict counts."""
    judged: dict[tuple, Counter] = {}
    for row in verdicts:
        judged.setdefault(key(row), Counter())[row["verdict"]] += 1
    reported = Counter(key(row) for row in findings) if findings is not None else None
    groups = set(judged) | (set(reported) if reported is not None else set())
    return {g: (reported[g] if reported is not None else None, judged.get(g, Counter())) for g in groups}


def _ratio(num: int, den: int) -> str:
    return f"{100 * num / den:.0f}%" if den else "-"


def _row(cells: list[str], reported: int | None, counts: Counter) -> str:
    t, f, d = (counts[v] for v in VERDICTS)
    n = t + f + d
    found = "-" if reported is None else str(reported)
    return "| " + " | ".join([*cells, found, str(n), str(t), str(f), str(d), _ratio(t, n), _ratio(t, t + f)]) + " |"


def _severity_order(severity: str) -> tuple[int, str]:
    return (SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES), severity)


def render(verdicts: list[dict[str, str]], findings: list[dict[str, str]] | None) -> str:
    head = "findings | judged | true | false | debatable | true/judged | true/(true+false)"
    lines = ["By severity", "", f"| severity | {head} |", "|---" * 8 + "|"]
    by_severity = tally(verdicts, findings, lambda r: (r["severity"],))
    for (severity,) in sorted(by_severity, key=lambda g: _severity_order(g[0])):
        reported, counts = by_severity[(severity,)]
        lines.append(_row([severity], reported, counts))
    lines += ["", "By rule and severity", "", f"| code | severity | {head} |", "|---" * 9 + "|"]
    by_rule = tally(verdicts, findings, lambda r: (r["code"], r["severity"]))
    for code, severity in sorted(by_rule, key=lambda g: (_severity_order(g[1]), g[0])):
        reported, counts = by_rule[(code, severity)]
        lines.append(_row([code, severity], reported, counts))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Precision tables from a blind round's lint verdicts.")
    parser.add_argument("verdicts", nargs="?", type=Path, help="a verdicts CSV (or use --round)")
    parser.add_argument("--round", type=int, help="read roundN_verdicts.csv (and roundN_findings.csv) here")
    parser.add_argument("--findings", type=Path, help="the round's findings CSV, for the 'findings' column")
    parser.add_argument("--within", type=Path, help="a findings CSV: count only its rows and the verdicts on them")
    args = parser.parse_args(argv)
    if (args.verdicts is None) == (args.round is None):
        parser.error("give either a verdicts CSV or --round N")
    verdicts_path = args.verdicts or HERE / f"round{args.round}_verdicts.csv"
    findings_path = args.findings or args.within
    if findings_path is None and args.round is not None:
        candidate = HERE / f"round{args.round}_findings.csv"
        findings_path = candidate if candidate.exists() else None
    try:
        verdicts = read_verdicts(verdicts_path)
        findings = read_findings(findings_path) if findings_path is not None else None
    except BadInput as e:
        print(f"precision: {e}", file=sys.stderr)
        return 2
    if args.within is not None and findings is not None:
        kept = {finding_key(row) for row in findings}
        verdicts = [row for row in verdicts if finding_key(row) in kept]
    print(render(verdicts, findings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
