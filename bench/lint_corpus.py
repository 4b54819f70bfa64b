"""Precision of `torchpact lint` on real, mature code: the 12 projects judged in
bench/corpus_judgement.csv (``lint_split.READ_BEFORE``, fetched by ``corpus.py``), each linted from its
own folder as its users would (its own pyproject.toml decides its settings), with preview findings
shown (every rule's errors and warnings, as the judgement records them). These figures are
**in-sample**: the rules were developed and fixed against these projects; the blind measurement is
``bench/lint_blind/``.

Every `error` and `warning` must have been read at its source and judged in
bench/corpus_judgement.csv (project, path, line, code, severity, verdict, reason; verdict `true` or
`false`). Prints the findings per rule, then the targets (issue 10): error precision >= 95%, warning
precision >= 80%, no unjudged error or warning, no TP001 for a file Python parses, no TP002.

Usage: python bench/lint_corpus.py [--show CODE] [--projects a,b]
(a project not in the corpus: skipped with its reason)
"""

from __future__ import annotations

import argparse
import ast
import csv
import os
import sys
from collections import Counter
from pathlib import Path

from corpus import NoCorpus, corpus_dir
from lint_split import READ_BEFORE

from torchpact.config import find_pyproject, load_config
from torchpact.lint import lint_paths

JUDGEMENT = Path(__file__).with_name("corpus_judgement.csv")


def judged() -> dict[tuple[str, str, int, str], tuple[str, str]]:
    out = {}
    with open(JUDGEMENT, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            out[(row["project"], row["path"], int(row["line"]), row["code"])] = (row["verdict"], row["reason"])
    return out


def parses(path: Path) -> bool:
    try:
        ast.parse(path.read_bytes())
        return True
    except (SyntaxError, ValueError):
        return False


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--show", action="append", default=[], help="print every finding of this code")
    ap.add_argument("--projects", help="comma-separated projects (default: the 12 judged ones, READ_BEFORE)")
    args = ap.parse_args()
    try:
        folder, have = corpus_dir(args.projects.split(",") if args.projects else READ_BEFORE)
    except NoCorpus as exc:
        print(f"skipped: no corpus ({exc})")
        return 0
    projects = [folder / name for name in have]
    verdicts = judged()
    by_rule: Counter = Counter()
    tally = {"error": Counter(), "warning": Counter()}
    unjudged, bad_input, lines = [], [], 0
    here = os.getcwd()
    for project in projects:
        os.chdir(project)
        try:
            config = load_config(find_pyproject(Path(".")))
            config.preview = True
            result = lint_paths(["."], config)
        finally:
            os.chdir(here)
        lines += result.lines
        for f in result.findings:
            by_rule[(f.code, f.severity.value)] += 1
            path = os.path.normpath(f.path or "")
            if f.code == "TP002" or (f.code == "TP001" and parses(project / path)):
                bad_input.append((project.name, path, f.line, f.code, f.message))
            if f.severity.value in tally:
                verdict = verdicts.get((project.name, path, f.line or 0, f.code))
                if verdict is None:
                    unjudged.append((project.name, path, f.line, f.code, f.severity.value, f.message))
                else:
                    tally[f.severity.value][verdict[0]] += 1
            if f.code in [c.upper() for c in args.show]:
                print(f"{project.name}/{path}:{f.line}: {f.code} {f.severity.value} {f.message}")
    print(f"corpus: {len(projects)} projects, {lines:,} lines")
    print(f"\n{'rule':<7} {'severity':<8} {'count':>6}")
    for (code, sev), n in sorted(by_rule.items()):
        print(f"{code:<7} {sev:<8} {n:>6}")
    ok = not unjudged and not bad_input
    for sev, target in (("error", 0.95), ("warning", 0.80)):
        c = tally[sev]
        total = c["true"] + c["false"]
        precision = c["true"] / total if total else 1.0
        ok &= precision >= target
        print(f"{sev} precision: {c['true']}/{total} = {precision:.0%} (target >= {target:.0%})")
    for row in unjudged:
        print("unjudged:", *row)
    for row in bad_input:
        print("input problem:", *row)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
