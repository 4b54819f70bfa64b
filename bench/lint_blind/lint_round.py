"""Lints the projects of one blind round and writes ``roundN_findings.csv`` beside this file (issue 30).

Each project is linted from its own folder, as its users would run it, with every rule on
(``--preview``), no cache, JSON out. The CSV has one row per finding
(``project,path,line,column,code,severity,message,evidence,cell``; ``cell`` is the notebook cell, 1-based, that
``line`` counts in, empty for a module) and is the population the judge reads and
samples; the summary printed here is counts only, so that whoever runs this need not read a finding.

With ``--default`` the same projects are linted as a user runs lint out of the box (no ``--preview``: the
default rule set of ``precision.json``), into ``roundN_default_findings.csv``; ``precision.py --within`` then
gives the default set's precision from the round's verdicts.

Usage: python bench/lint_blind/lint_round.py --round 2 --root /path/to/corpus-round2 [--default]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from lint_split import (BLIND_ROUND1, BLIND_ROUND2, BLIND_ROUND3, BLIND_ROUND4, BLIND_ROUND5,  # noqa: E402
                        BLIND_ROUND6, BLIND_ROUND7, BLIND_ROUND8, BLIND_ROUND9)

ROUNDS = {1: BLIND_ROUND1, 2: BLIND_ROUND2, 3: BLIND_ROUND3, 4: BLIND_ROUND4, 5: BLIND_ROUND5, 6: BLIND_ROUND6,
          7: BLIND_ROUND7, 8: BLIND_ROUND8, 9: BLIND_ROUND9}
COLUMNS = ("project", "path", "line", "column", "code", "severity", "message", "evidence", "cell")


def lint_project(folder: Path, preview: bool = True) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "torchpact", "lint", *(["--preview"] if preview else []), "--no-cache", "--exit-zero",
         "--format", "json", "."],
        cwd=folder, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"lint of {folder} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout)["findings"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--round", type=int, required=True, choices=sorted(ROUNDS))
    parser.add_argument("--root", type=Path, required=True, help="folder holding one folder per project")
    parser.add_argument("--default", action="store_true", help="lint without --preview (the default rule set)")
    parser.add_argument("--out", type=Path,
                        help="default: roundN[_default]_findings.csv beside this file")
    args = parser.parse_args(argv)
    out = args.out or HERE / f"round{args.round}{'_default' if args.default else ''}_findings.csv"
    rows = []
    for project in ROUNDS[args.round]:
        folder = args.root / project
        if not folder.is_dir():
            raise SystemExit(f"{folder}: missing (fetch the round first)")
        for f in lint_project(folder, preview=not args.default):
            rows.append({"project": project, "path": os.path.relpath(f["path"], folder) if os.path.isabs(f["path"])
                         else f["path"], "line": f["line"], "column": f.get("column", 0), "code": f["code"],
                         "severity": f["severity"], "message": f["message"],
                         "evidence": f.get("evidence") or "", "cell": f.get("cell") or ""})
        print(f"{project}: {sum(r['project'] == project for r in rows)} findings", flush=True)
    with open(out, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    counts = Counter(r["severity"] for r in rows)
    print(f"{out.name}: " + ", ".join(f"{counts[s]} {s}" for s in ("error", "warning", "info")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
