"""Two callables timed in the same rounds, and the confidence interval of their ratio.

Timing eager once and a compiled mode minutes later lets the machine's load between the two enter
the ratio (one run on a shared machine timed eager BERT at 22.9 ms where it runs in 2.6 ms). Here
each round runs a block of calls of each callable back to back, the order alternating from round to
round, and the statistic is per round: the median wall time of the baseline's block over the median
of the other's. A stretch of load then lands on both sides of one round's ratio, not on one side of
every ratio. The rounds' log ratios give a t interval (95%) of the geometric mean ratio; the same
is done with the CPU time per call (``time.process_time``, all of this process's threads), which a
busy machine's waiting does not enter.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

from torchpact.median import median

ROUNDS = 15
# two-sided 95% t quantiles by degrees of freedom (normal beyond 30)
_T95 = {1: 12.71, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
        20: 2.086, 22: 2.074, 24: 2.064, 26: 2.056, 28: 2.048, 30: 2.042}


def t95(df: int) -> float:
    if df <= 0:
        return math.inf
    if df in _T95:
        return _T95[df]
    below = [k for k in _T95 if k <= df]
    return _T95[max(below)] if df <= 30 else 1.96


@dataclass
class Ratio:
    """The geometric mean of per-round ratios with its 95% interval."""

    ratio: float
    low: float
    high: float
    rounds: int

    def to_dict(self) -> dict[str, Any]:
        return {"ratio": round(self.ratio, 3), "low": round(self.low, 3), "high": round(self.high, 3),
                "rounds": self.rounds}

    def text(self) -> str:
        return f"{self.ratio:.2f}x [{self.low:.2f}, {self.high:.2f}]"


def ratio_interval(ratios: list[float]) -> Ratio | None:
    """Geometric mean of ``ratios`` and the t interval of their log mean; None without two positive ratios."""
    logs = [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]
    if len(logs) < 2:
        return None
    mean = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    half = t95(len(logs) - 1) * sd / math.sqrt(len(logs))
    return Ratio(math.exp(mean), math.exp(mean - half), math.exp(mean + half), len(logs))


def _block(fn: Callable[[], Any], calls: int) -> tuple[list[float], float]:
    """Wall times (ms) of ``calls`` calls and their CPU time per call (ms)."""
    walls = []
    cpu = time.process_time()
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        walls.append((time.perf_counter() - t) * 1000)
    return walls, (time.process_time() - cpu) * 1000 / calls


def paired(baseline: Callable[[], Any], other: Callable[[], Any], budget_s: float,
           rounds: int = ROUNDS) -> dict[str, Any]:
    """``baseline`` and ``other`` timed in the same ``rounds``; ``speedup`` is baseline / other (wall,
    per round), ``cpu_speedup`` the same with CPU time per call. Raises what a call raises."""
    for _ in range(3):  # warm-up: the first calls after a pause wake torch's thread pool
        baseline()
        other()
    one = min(_block(baseline, 1)[0][0], _block(other, 1)[0][0])  # ms
    calls = max(3, min(200, int(budget_s * 1000 / max(one, 1e-3) / (2 * rounds))))
    walls: dict[str, list[list[float]]] = {"baseline": [], "other": []}
    cpus: dict[str, list[float]] = {"baseline": [], "other": []}
    for r in range(rounds):
        order = (("baseline", baseline), ("other", other)) if r % 2 == 0 else (("other", other), ("baseline", baseline))
        for label, fn in order:
            w, c = _block(fn, calls)
            walls[label].append(w)
            cpus[label].append(c)
    wall_ratio = ratio_interval([median(a) / median(b) for a, b in zip(walls["baseline"], walls["other"], strict=True)
                                 if median(b) > 0])
    cpu_ratio = ratio_interval([a / b for a, b in zip(cpus["baseline"], cpus["other"], strict=True) if b > 0])

    def stats(label: str) -> dict[str, Any]:
        times = sorted(t for block in walls[label] for t in block)
        return {"p50": round(median(times), 3), "p99": round(times[min(len(times) - 1, int(0.99 * len(times)))], 3),
                "cpu_ms": round(median(cpus[label]), 3), "calls": len(times)}

    return {"baseline": stats("baseline"), "other": stats("other"), "rounds": rounds, "calls_per_block": calls,
            "speedup": wall_ratio.to_dict() if wall_ratio else None,
            "cpu_speedup": cpu_ratio.to_dict() if cpu_ratio else None}


def cpu_seconds() -> float:
    """CPU seconds of this process, of its children that ended, and of its live child processes
    (inductor's compile workers)."""
    import os

    ended = os.times()
    total = time.process_time() + ended.children_user + ended.children_system
    try:
        import psutil
    except ImportError:
        return total
    try:
        for child in psutil.Process().children(recursive=True):
            try:
                t = child.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                continue
    except psutil.Error:
        pass
    return total
