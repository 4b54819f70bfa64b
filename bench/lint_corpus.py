"""Precision of `torchpact lint` on real, mature code (transformers 5.23.0 + pytorch-lightning 2.6.6).

Prints files, lines, seconds, and findings per rule per 10k lines; then the targets: at most 0.2
errors and 3 warnings+errors per 10k lines, every file read. Usage: python bench/lint_corpus.py [--show CODE]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from corpus import corpus_dir

from torchpact.config import Config
from torchpact.lint import lint_paths


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--show", action="append", default=[], help="print every finding of this code")
    args = ap.parse_args()
    folder = corpus_dir()
    result = lint_paths([str(folder)], Config())
    findings = result.findings
    lines = result.lines
    per10k = lambda n: n * 10_000 / lines  # noqa: E731
    unread = [f for f in findings if f.category.value == "input"]
    print(f"corpus: {folder}")
    print(f"files {len(result.files)}  lines {lines}  seconds {result.seconds:.2f}  "
          f"({lines / result.seconds:,.0f} lines/s)  unread files {len(unread)}")
    by_rule = Counter((f.code, f.severity.value) for f in findings)
    print(f"\n{'rule':<7} {'severity':<8} {'count':>6} {'per 10k':>8}")
    for (code, sev), n in sorted(by_rule.items()):
        print(f"{code:<7} {sev:<8} {n:>6} {per10k(n):>8.3f}")
    errors = sum(1 for f in findings if f.severity.value == "error")
    warn_err = errors + sum(1 for f in findings if f.severity.value == "warning")
    ok = per10k(errors) <= 0.2 and per10k(warn_err) <= 3 and not unread
    print(f"\nerrors per 10k lines: {per10k(errors):.3f} (target <= 0.2)")
    print(f"warnings+errors per 10k lines: {per10k(warn_err):.3f} (target <= 3)")
    print(f"every file read: {'yes' if not unread else 'no'}")
    print("PASS" if ok else "FAIL")
    for code in args.show:
        print(f"\n--- {code}")
        for f in findings:
            if f.code == code.upper():
                print(f"{f.path}:{f.line}:{f.column}: {f.message}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
