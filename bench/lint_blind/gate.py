"""Writes lint's default rule set: ``src/torchpact/lint/precision.json`` from blind verdicts (issue 30).

Each verdict CSV has the columns ``project,path,line,code,severity,verdict,reason``, one row per
finding read at its source; ``verdict`` is ``true``, ``false`` or ``debatable``. Per (code, severity):

    precision = true / judged        (judged: every row read, debatable ones included)

and the (code, severity) is stable, so on by default, when the precision reaches the bar of its
severity (``torchpact.lint.preview.BARS``: 97% for error, 90% for warning, 80% for info) and, for an
error or warning, at least ``MIN_JUDGED`` findings were judged. The file
records true, judged, the corpus (projects), the commit linted and the date; rule pages and
``torchpact rules`` show it. The measurements of a round replace the file's (``--merge`` keeps those
of codes the new verdicts do not cover).

With ``--pooled`` (what the package's file is written with since round 4) the verdicts of every blind
round since the gate existed (``POOLED``: rounds 2 to 9) are added up per (code, severity): a
rule is on by default when all the blind findings read of it reach the bar, not only the latest round's.
A latest round alone swung rules both ways on one or two findings (TP952 on at 4/4 after 10/18; TP312
off at 1/1 after 3/3); pooled, a false alarm once read keeps counting, which is the side to err on. A
rule changed on a round's verdicts keeps that round's false ones until later rounds outweigh them.

Usage: python bench/lint_blind/gate.py VERDICTS.csv [...] --commit SHA [--date YYYY-MM-DD]
       [--projects a,b,...] [--merge] [--out PATH]
       python bench/lint_blind/gate.py --pooled [--out PATH]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import re
import sys
from collections import Counter
from pathlib import Path

from torchpact.findings import Severity
from torchpact.lint.preview import DATA_FILE, Measure, stable

COLUMNS = ("project", "path", "line", "code", "severity", "verdict", "reason")
HERE = Path(__file__).resolve().parent
# round -> (verdicts, the commit whose lint was judged, the date): the rounds --pooled adds up
POOLED = {2: ("round2_verdicts.csv", "a10c47f", "2026-12-06"),
          3: ("round3_verdicts.csv", "29ef462", "2026-12-06"),
          4: ("round4_verdicts.csv", "080c7e8", "2026-12-06"),
          5: ("round5_verdicts.csv", "f343d24", "2026-12-06"),
          6: ("round6_verdicts.csv", "df7825e", "2026-12-06"),
          7: ("round7_verdicts.csv", "41f4947", "2026-12-06"),
          8: ("round8_verdicts.csv", "dec94b8", "2026-12-06"),
          9: ("round9_verdicts.csv", "fd89a93", "2026-12-06")}
VERDICTS = ("true", "false", "debatable")
CODE = re.compile(r"^TP\d{3}$")


class VerdictError(Exception):
    """A verdict file gate.py cannot use: one line saying where and why."""


def read_verdicts(paths: list[str]) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for path in paths:
        try:
            with open(path, newline="", encoding="utf-8") as fh:
                reader = csv.DictReader(fh)
                missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
                if missing:
                    raise VerdictError(f"{path}: missing column(s) {', '.join(missing)}")
                for n, row in enumerate(reader, start=2):
                    code = (row["code"] or "").strip().upper()
                    severity = (row["severity"] or "").strip().lower()
                    verdict = (row["verdict"] or "").strip().lower()
                    if not CODE.match(code):
                        raise VerdictError(f"{path}:{n}: code {row['code']!r} is not TPnnn")
                    if severity not in {s.value for s in Severity}:
                        raise VerdictError(f"{path}:{n}: severity {row['severity']!r} is not error, warning or info")
                    if verdict not in VERDICTS:
                        raise VerdictError(f"{path}:{n}: verdict {row['verdict']!r} is not true, false or debatable")
                    rows.append({**row, "code": code, "severity": severity, "verdict": verdict,
                                 "project": (row["project"] or "").strip()})
        except OSError as exc:
            raise VerdictError(f"cannot read {path}: {exc.strerror or exc}") from None
    return rows


def measurements(rows: list[dict[str, str]], commit: str, date: str,
                 projects: list[str] | None = None) -> dict[str, dict[str, dict]]:
    """code -> severity -> {true, judged, corpus, commit, date}."""
    corpus = sorted(set(projects) if projects else {r["project"] for r in rows if r["project"]})
    true: Counter[tuple[str, str]] = Counter()
    judged: Counter[tuple[str, str]] = Counter()
    for r in rows:
        key = (r["code"], r["severity"])
        judged[key] += 1
        true[key] += r["verdict"] == "true"
    out: dict[str, dict[str, dict]] = {}
    for (code, severity), n in sorted(judged.items()):
        out.setdefault(code, {})[severity] = {"true": true[(code, severity)], "judged": n, "corpus": corpus,
                                              "commit": commit, "date": date}
    return out


def pooled() -> dict[str, dict[str, dict]]:
    """code -> severity -> the sum over the ``POOLED`` rounds that judged it: true, judged, the union of their
    corpora, their commits (joined by '+') and the latest date."""
    sys.path.insert(0, str(HERE.parent))
    import lint_split

    out: dict[str, dict[str, dict]] = {}
    for number, (name, commit, date) in sorted(POOLED.items()):
        projects = list(getattr(lint_split, f"BLIND_ROUND{number}"))
        for code, by_severity in measurements(read_verdicts([str(HERE / name)]), commit, date, projects).items():
            for severity, m in by_severity.items():
                got = out.setdefault(code, {}).get(severity)
                if got is None:
                    out[code][severity] = m
                    continue
                out[code][severity] = {"true": got["true"] + m["true"], "judged": got["judged"] + m["judged"],
                                       "corpus": sorted(set(got["corpus"]) | set(m["corpus"])),
                                       "commit": f"{got['commit']}+{m['commit']}", "date": max(got["date"], m["date"])}
    return out


def table(measured: dict[str, dict[str, dict]]) -> list[str]:
    lines = [f"{'code':<5}  {'severity':<8}  {'true/judged':>11}  {'precision':>9}  default"]
    for code, by_severity in sorted(measured.items()):
        for severity, m in sorted(by_severity.items()):
            precision = m["true"] / m["judged"] if m["judged"] else 0.0
            on = stable(Severity(severity), Measure(m["true"], m["judged"], (), "", ""))
            lines.append(f"{code:<5}  {severity:<8}  {str(m['true']) + '/' + str(m['judged']):>11}  {precision:>9.0%}  "
                         f"{'on' if on else 'preview'}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="write lint's precision.json from blind verdict CSVs")
    ap.add_argument("verdicts", nargs="*", metavar="VERDICTS.csv")
    ap.add_argument("--pooled", action="store_true", help="add up the verdicts of the POOLED rounds instead")
    ap.add_argument("--commit", help="the commit whose findings were judged")
    ap.add_argument("--date", default=datetime.date.today().isoformat(), help="when (default: today)")
    ap.add_argument("--projects", help="comma-separated projects of the blind corpus (default: those in the CSVs)")
    ap.add_argument("--merge", action="store_true", help="keep the measurements of codes the verdicts do not cover")
    ap.add_argument("--out", default=DATA_FILE, help="the file to write (default: the package's precision.json)")
    args = ap.parse_args(argv)
    if args.pooled == bool(args.verdicts) or (args.verdicts and not args.commit):
        ap.error("give VERDICTS.csv files with --commit, or --pooled alone")
    try:
        if args.pooled:
            new = pooled()
        else:
            rows = read_verdicts(args.verdicts)
            projects = [p.strip() for p in args.projects.split(",") if p.strip()] if args.projects else None
            new = measurements(rows, args.commit, args.date, projects)
    except VerdictError as exc:
        print(f"gate.py: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    try:
        data = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    measured = dict(data.get("measured") or {}) if args.merge else {}
    for code, by_severity in new.items():
        measured[code] = {**(measured.get(code, {}) if args.merge else {}), **by_severity}
    data["measured"] = dict(sorted(measured.items()))
    out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print("\n".join(table(new)))
    count = sum(m["judged"] for by_severity in new.values() for m in by_severity.values())
    print(f"{count} verdicts -> {out}; run `make docs` to update the rule pages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
