"""export-check: every way to ship a model, each compared with eager on varied inputs.

The paths are ``torch.jit.trace``, ``torch.jit.script``, ``torch.export.export`` (batch, sequence,
time and image height/width dimensions marked ``Dim.AUTO``; non-strict, torch 2.13's default, and strict) and
``torch.onnx.export`` (2.13's default exporter, which runs torch.export) run in onnxruntime; each is one module of this
package following :class:`~torchpact.audit.export.path.ExportPath`. Each artifact is built from
the example, then run on every variant of :mod:`torchpact.audit.variants` and compared with eager.
This package computes plain data (:class:`PathResult`) and :class:`~torchpact.findings.Finding`
objects; the reporters present them.
"""

from __future__ import annotations

import inspect
import re
import time
from typing import Any, Callable

from torchpact.audit import _common as C
from torchpact.audit import timing as T
from torchpact.audit.eager import eager_inputs
from torchpact.audit.export import findings as F
from torchpact.audit.export.checks import OUTPUT_TYPE
from torchpact.audit.export.onnx import OnnxPath
from torchpact.audit.export.path import Context, ExportPath
from torchpact.audit.export.results import FAILED, SKIPPED, ExportReport, PathResult
from torchpact.audit.export.probes import probe_variants
from torchpact.audit.export.run import artifact_latency, run_more, run_path
from torchpact.audit.export.script import ScriptPath
from torchpact.audit.export.torch_export import TorchExportPath
from torchpact.audit.export.trace import TracePath
from torchpact.audit.export.training import training_mode
from torchpact.audit.target import Target
from torchpact.audit.variants import EXAMPLE, Variant
from torchpact.findings import Finding, Severity

PATH_OBJECTS: tuple[ExportPath, ...] = (TracePath(), ScriptPath(), TorchExportPath(), OnnxPath())
PATHS = tuple(p.name for p in PATH_OBJECTS)


def _model_location(model: Any) -> tuple[str | None, int | None]:
    try:
        forward = type(model).forward
        return inspect.getsourcefile(forward), inspect.getsourcelines(forward)[1]
    except (TypeError, OSError):
        return None, None


def export_check(target: Target, paths: tuple[str, ...] = PATHS, strict_too: bool = True,
                 progress: Callable[[str], None] | None = None, threads: int | None = None,
                 budget_s: float = T.BUDGET_S) -> ExportReport:
    """Build every path from the example, run it on the variants, compare with eager.

    ``threads``: torch's intra-op threads for the whole check (None: as configured). On a machine
    whose cores are busy, one thread avoids the thread pool's wake-up stalls that make every op slow.
    ``budget_s``: seconds of timing per input for eager (as compile-check), and per path for the
    artifact with eager alongside.
    """
    with C.torch_threads(threads):
        return _export_check(target, paths, strict_too, progress, budget_s)


def _export_check(target: Target, paths: tuple[str, ...], strict_too: bool,
                  progress: Callable[[str], None] | None, budget_s: float) -> ExportReport:
    start = time.perf_counter()
    note = progress or (lambda s: None)
    model = target.model
    example = Variant(EXAMPLE, EXAMPLE, tuple(target.args), dict(target.kwargs))
    findings: list[Finding] = []
    path, line = _model_location(model)
    # the training-mode finding points at FUNC, which hands the model over
    mode = training_mode(model, example, *((target.path, target.line) if target.line else (path, line)))
    if mode is not None:
        findings.append(mode)
    dims, _, eager = eager_inputs(model, target.args, target.kwargs)
    example = eager.valid[0]
    note("eager latency")
    eager_ms = T.eager_latency(model, eager.valid, dims, C.model_device(model), budget_s)

    def latency(run: Callable[[Variant], Any]) -> dict[str, Any]:
        with T.eval_mode(model):
            return artifact_latency(run, lambda: model(*example.args, **example.kwargs), example,
                                    eager_ms["example"], budget_s / 2)

    results: dict[str, PathResult] = {}
    strict: PathResult | None = None
    for path_obj in PATH_OBJECTS:
        name = path_obj.name
        if name not in paths:
            results[name] = PathResult(name, SKIPPED, "not requested")
            continue
        why = path_obj.unavailable()
        if why:
            results[name] = PathResult(name, SKIPPED, why)
            continue
        note(name)
        results[name] = run_path(name, lambda r, p=path_obj: p.build(model, example, dims, r), eager, example,
                                 latency)
        if name == "export" and strict_too:
            note("export (strict)")
            strict = run_path("export", lambda r: TorchExportPath(strict=True).build(model, example, dims, r),
                              eager, example, None)
    probes = probe_variants(results, example, dims, eager)
    if probes:
        note(f"{len(probes)} sizes past the bounds torch stated")
        for r in [*results.values()] + ([strict] if strict is not None else []):
            run_more(r, probes, eager)
    if strict is not None:
        results["export"].detail["strict"] = {"status": strict.status, "reason": strict.reason,
                                               "max_abs_err": C.rounded(strict.max_abs_err),
                                               "seconds": round(strict.seconds, 3)}
        results["export"].detail["mode"] = "non-strict"

    findings += F.structure_findings(results, eager.valid)
    output_findings = F.output_type_findings(eager, results)
    covered = {n for n, p in results.items() if p.status == FAILED and any(
        f.code == OUTPUT_TYPE.code and f.severity != Severity.INFO for f in output_findings)
        and re.search(F.CARRY, C.error_text(p.error))}
    findings += output_findings
    context = Context(model, (path, line), results)
    for path_obj in PATH_OBJECTS:
        if path_obj.name in results:
            found, explained = path_obj.findings(context)
            findings += found
            covered |= explained
    findings += F.failure_findings(results, covered)
    findings += F.mismatch_findings(results, covered)
    findings += F.deprecation_findings(results)
    return ExportReport(findings=findings, paths=results, variants=eager.valid, dims=dims,
                        seconds=time.perf_counter() - start, invalid_variants=eager.invalid,
                        eager_latency_ms=eager_ms)
