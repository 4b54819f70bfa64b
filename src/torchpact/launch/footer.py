"""Lines for the text report's footer of `torchpact run`, from the run's plain data.

Only formats what the run and its watchers computed; ``report.text`` prints the lines.
"""

from __future__ import annotations

import os
from typing import Any

from torchpact.launch.single import RunOutcome

PHASE_NAMES = {"dataloader": "data loading", "forward": "forward", "backward": "backward",
               "optimizer": "optimizer", "communication": "communication", "sync": "host-device syncs",
               "idle": "Python between phases"}


def run_footer(outcome: RunOutcome) -> list[str]:
    steps = f"{outcome.steps} optimizer step{'s' * (outcome.steps != 1)}"
    lines = [f"{outcome.script}: {steps} in {outcome.seconds:.2f}s, "
             f"exit code {outcome.exit_code}"]
    profile = outcome.data.get("profile")
    if profile:
        lines += profile_lines(profile)
    return lines


def profile_lines(profile: dict[str, Any], top: int = 5) -> list[str]:
    """Where the median profiled step's time goes, the costliest operators, and the trace's path."""
    if profile.get("status") != "ok":
        return [f"profile: {profile.get('status', 'not run')} ({profile.get('reason', 'no step was profiled')})"]
    steps = profile.get("steps") or []
    median = profile.get("median") or {}
    total = sum(median.values())
    lines = []
    if steps and total > 0:
        shares = sorted(((v, k) for k, v in median.items() if v > 0), reverse=True)
        parts = ", ".join(f"{PHASE_NAMES.get(k, k)} {v / total:.0%}" for v, k in shares)
        lines.append(f"profile: a step takes {total * 1000:.1f} ms (median of {len(steps)} profiled steps): {parts}")
    ops = profile.get("top_ops") or []
    if ops:
        key = "device_ms" if profile.get("device") else "self_ms"
        lines.append("  top operators (self time over the profiled steps): " + ", ".join(
            f"{o['name']} {o[key]:.2f} ms ×{o['calls']}" for o in ops[:top]))
    trace = profile.get("trace")
    if trace:
        lines.append(f"  trace: {trace} (Perfetto: ui.perfetto.dev; TensorBoard: "
                     f"tensorboard --logdir {os.path.dirname(trace) or '.'})")
    return lines
