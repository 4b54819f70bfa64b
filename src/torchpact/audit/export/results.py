"""What export-check computed, as plain data: per variant, per path, and the whole report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchpact.audit import _common as C
from torchpact.audit.variants import Dims, Variant
from torchpact.findings import Finding

OK, MISMATCH, FAILED, SKIPPED = "ok", "mismatch", "failed", "skipped"


@dataclass
class VariantResult:
    name: str
    kind: str
    status: str  # ok / mismatch / error / skipped
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    problem: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "kind": self.kind, "status": self.status,
               "max_abs_err": C.rounded(self.max_abs_err), "max_rel_err": C.rounded(self.max_rel_err)}
        if self.problem:
            out["problem"] = self.problem
        return out


@dataclass
class PathResult:
    """One path's outcome; ``to_dict`` is its entry in ``summary.paths``."""

    name: str
    status: str = SKIPPED
    reason: str = ""
    variants: list[VariantResult] = field(default_factory=list)
    latency_ms: dict[str, float | None] | None = None
    seconds: float = 0.0
    error: BaseException | None = None
    warnings: list[C.CaughtWarning] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)
    explained: set[str] = field(default_factory=set)  # broken variants a finding already explains
    runner: Any = field(default=None, repr=False)  # the built artifact, fed one variant at a time

    @property
    def max_abs_err(self) -> float | None:
        errs = [v.max_abs_err for v in self.variants if v.max_abs_err is not None]
        return max(errs) if errs else None

    @property
    def max_rel_err(self) -> float | None:
        errs = [v.max_rel_err for v in self.variants if v.max_rel_err is not None]
        return max(errs) if errs else None

    def broken(self, kind: str | None = None) -> list[VariantResult]:
        return [v for v in self.variants if v.status in ("mismatch", "error") and (kind is None or v.kind == kind)
                and v.name not in self.explained]

    def errors(self) -> list[dict[str, str]]:
        """What the path raised: while building the artifact, then on each variant."""
        out = [{"at": "build", "error": C.first_line(self.error, 300)}] if self.error is not None else []
        return out + [{"at": v.name, "error": v.problem or ""} for v in self.variants if v.status == "error"]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "reason": self.reason,
                               "max_abs_err": C.rounded(self.max_abs_err), "max_rel_err": C.rounded(self.max_rel_err),
                               "errors": self.errors(),
                               "variants": [v.to_dict() for v in self.variants],
                               "latency_ms": self.latency_ms, "seconds": round(self.seconds, 3)}
        out.update(self.detail)
        return out


@dataclass
class ExportReport:
    """What export-check found: findings and the per-path data of ``summary.paths``."""

    findings: list[Finding]
    paths: dict[str, PathResult]
    variants: list[Variant]
    dims: Dims
    seconds: float
    invalid_variants: dict[str, str] = field(default_factory=dict)
    eager_latency_ms: dict[str, dict[str, Any]] = field(default_factory=dict)  # input -> p50/p99, clean state

    def summary(self) -> dict[str, Any]:
        return {
            "target_dims": self.dims.describe(),
            "eager_latency_ms": self.eager_latency_ms,
            "variants": [{"name": v.name, "kind": v.kind} for v in self.variants]
                        + [{"name": n, "kind": "invalid", "reason": r} for n, r in self.invalid_variants.items()],
            "paths": {name: p.to_dict() for name, p in self.paths.items()},
            "seconds": round(self.seconds, 3),
        }
