"""``torchpact report``: a saved JSON report rendered again, as a page (--html) and/or in --format."""

from __future__ import annotations

import argparse
from typing import Any

from torchpact.commands.outcome import Outcome, Report, UsageError
from torchpact.findings import Finding


def execute(args: argparse.Namespace) -> Outcome:
    import json

    try:
        with open(args.json_report, encoding="utf-8") as fh:
            doc = json.load(fh)
        findings = [Finding.from_dict(f) for f in doc["findings"]]
    except OSError as exc:
        raise UsageError(f"cannot read {args.json_report}: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{args.json_report} is not a torchpact JSON report "
                         f"({exc.__class__.__name__}: {exc})") from None
    summary = {k: v for k, v in (doc.get("summary") or {}).items()
               if k not in ("total", "by_severity", "by_code", "by_category")}
    meta: dict[str, Any] = {"command": doc.get("command"), "torch": doc.get("torch"), "summary": summary}
    return Outcome(findings=findings, fail_on=args.fail_on,
                   report=Report(findings, meta, format=args.format, output=args.output, html=args.html,
                                 doc=doc))  # a saved report may hold runtime codes: runtime_rules stays on
