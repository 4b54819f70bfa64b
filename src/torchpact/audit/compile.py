"""compile-check: what torch.compile does with the model, measured.

Eager latency first, before any dynamo work, by :func:`torchpact.audit.timing.eager_latency` exactly
as export-check times it (reported, not used to rank); then graph breaks with their reasons and
model lines (``torch._dynamo.explain``). When dynamo captures no graph at all (an ``nn.LSTM`` with
``allow_rnn`` off) every mode would run eagerly: that is reported and nothing is recommended.
Otherwise inductor's one-time setup is timed apart, then per mode the cold compile (wall and CPU
seconds: on a shared machine the wall time swings with the load, the CPU time much less), the
recompilations the varied inputs trigger (with the guard that failed, from dynamo's compilation
metrics), parity with eager on every variant, and warm latency on the example, the smallest and the
largest batch, each timed in the same rounds as eager (:mod:`torchpact.audit.paired`) so that the
ratio is paired, with its 95% interval. Modes: ``default`` and ``max-autotune-no-cudagraphs``
everywhere; ``reduce-overhead`` and ``max-autotune`` (CUDA graphs) when the model is on CUDA.

A mode is recommended only when the lower end of its speed-up interval clears ``1 + MARGIN``; "no
recommendation: noise", with the intervals, otherwise. Plain data and Findings here; the reporters present them.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from torchpact.audit import _common as C
from torchpact.audit import timing as T
from torchpact.audit.paired import cpu_seconds, paired
from torchpact.audit.eager import eager_inputs
from torchpact.audit.target import Target
from torchpact.audit.variants import Dims, Variant
from torchpact.findings import Category, Finding, Severity
from torchpact.checks import Check

CPU_MODES = ("default", "max-autotune-no-cudagraphs")
CUDA_MODES = ("reduce-overhead", "max-autotune")
CUDAGRAPH_MODES = frozenset(CUDA_MODES)

_RUNTIME = "\n\n(Found by `torchpact compile-check`, which compiles the model and runs it on varied inputs.)"

GRAPH_BREAK = Check(
    code="TP851", category=Category.COMPILE, severity=Severity.WARNING,
    summary="torch.compile breaks the model's graph at this line.",
    doc="""## What it does
Runs `torch._dynamo.explain` on the example and reports every graph break with dynamo's reason and
the model line where it happened.

## Why is this bad?
At a graph break dynamo stops the graph, runs the offending code in Python, and starts a new graph
after it: each break costs a return to Python, splits the code the compiler can fuse, and makes
`torch.compile(fullgraph=True)` and `torch.export` (strict) fail there. Common causes on torch 2.13:
`print` / logging, a Python `if` on a tensor value (`generic_jump TensorVariable()`), `.item()` /
`.tolist()`, calls into unsupported C extensions or numpy.

## How to fix
Move the code out of `forward`, express data-dependent branches with `torch.where` / `torch.cond`,
or keep the break where it is cheap (outside the hot loop).""" + _RUNTIME)

RECOMPILE = Check(
    code="TP852", category=Category.COMPILE, severity=Severity.INFO,
    severity_note="`warning` when the recompilations hit torch._dynamo's recompile_limit, so the function runs eagerly "
                  "from then on",
    summary="torch.compile recompiled the model for another input; the failed guard is named.",
    doc="""## What it does
Runs the compiled model on the varied inputs and reports each recompilation with the guard that
failed (dynamo's `recompile_reason`, e.g. `tensor 'x' size mismatch at index 0. expected 2, actual 1`).

## Why is this bad?
By default torch 2.13 compiles for the example's exact sizes; the first other size recompiles with
that dimension dynamic (automatic dynamic shapes), and sizes 0 and 1 are specialised separately. Each
recompilation costs about a cold compile, and after `recompile_limit` (8) recompilations of one
function dynamo falls back to eager for it.

## How to fix
Mark the varying dimensions dynamic up front (`torch._dynamo.mark_dynamic(x, 0)` or
`torch.compile(..., dynamic=True)`), or pad / bucket sizes to a few values.""" + _RUNTIME)

COMPILE_PARITY = Check(
    code="TP853", category=Category.COMPILE, severity=Severity.ERROR,
    severity_note="`warning` when the compiled model raises on the varied inputs instead of returning values that "
                  "differ from eager",
    summary="The compiled model gives other results than eager.",
    doc="""## What it does
Compares the compiled model's outputs with eager's on every variant, per mode, with the tolerance
`1e-5 + 1e-4 * max|eager|`.

## Why is this bad?
Inductor reorders and fuses floating-point operations, so bitwise differences are expected; a
difference beyond that tolerance means the compiled model computes something else (a dynamo or
inductor bug, or a model that depends on Python side effects dynamo does not replay).

## How to fix
Reproduce with `torch._dynamo.config` / `torch._inductor.config` options narrowed (e.g.
`backend="aot_eager"`), and report the bug with the variant named.""" + _RUNTIME)

COMPILE_FAILED = Check(
    code="TP854", category=Category.COMPILE, severity=Severity.WARNING,
    summary="torch.compile failed for a mode.",
    doc="""## What it does
Reports the error a compile mode raised on the example (or on a variant).

## Why is this bad?
The mode cannot be used for this model as it is written.

## How to fix
Follow the reason; `TORCH_LOGS=graph_breaks,recompiles` gives more detail.""" + _RUNTIME)

NOTHING_COMPILED = Check(
    code="TP855", category=Category.COMPILE, severity=Severity.WARNING,
    summary="torch.compile captured no graph: every mode runs the model eagerly.",
    doc="""## What it does
Runs `torch._dynamo.explain` on the example; when it reports zero graphs, says why when it can tell
(an `nn.LSTM` / `nn.GRU` / `nn.RNN` with `torch._dynamo.config.allow_rnn` off) and measures no mode.

## Why is this bad?
On torch 2.13 dynamo skips the frames of recurrent modules while `torch._dynamo.config.allow_rnn`
is `False` (the default): `torch.compile(model)` then returns a wrapper that runs the model in
eager, in any mode. A speed-up measured on it is noise, and the compile buys nothing.

## How to fix
Set `torch._dynamo.config.allow_rnn = True` before `torch.compile` to let dynamo trace the recurrent
module (and check parity), or do not compile this model.""" + _RUNTIME)

CHECKS = (GRAPH_BREAK, RECOMPILE, COMPILE_PARITY, COMPILE_FAILED, NOTHING_COMPILED)

MARGIN = 0.10  # a mode is recommended when eager / mode is at least 1.10x at the interval's lower end
NOISE = 0.1  # between modes that both clear the margin, default is kept when within 10% of the fastest

CUDAGRAPH_NOTE = ("reduce-overhead and max-autotune use CUDA graphs, which are re-recorded for every new "
                  "input shape (each batch size or sequence length records and keeps another graph); "
                  "the default mode does not")


@dataclass
class Recompile:
    variant: str
    function: str
    reason: str  # the first guard that failed, without dynamo's "0/1: " compile id
    path: str | None = None
    line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, "function": self.function, "guard_failed": self.reason}


@dataclass
class ModeResult:
    """One compile mode, measured."""

    mode: str
    status: str = "skipped"  # ok / mismatch / failed / skipped
    reason: str = ""
    cold_compile_s: float | None = None  # the first call, compilation included, after inductor's setup
    cold_compile_cpu_s: float | None = None  # the same call's CPU seconds (this process and its workers)
    recompiles: list[Recompile] = field(default_factory=list)
    parity: list[dict[str, Any]] = field(default_factory=list)
    latency_ms: dict[str, dict[str, Any]] = field(default_factory=dict)  # input -> p50/p99, paired with eager
    error: BaseException | None = None
    hit_limit: bool = False

    def to_dict(self) -> dict[str, Any]:
        errs = [p["max_abs_err"] for p in self.parity if p.get("max_abs_err") is not None]
        return {"status": self.status, "reason": self.reason,
                "cold_compile_s": C.rounded(self.cold_compile_s, 3),
                "cold_compile_cpu_s": C.rounded(self.cold_compile_cpu_s, 3),
                "recompiles": [r.to_dict() for r in self.recompiles],
                "max_abs_err": max(errs) if errs else None,
                "variants": self.parity, "latency_ms": self.latency_ms}


@dataclass
class CompileReport:
    findings: list[Finding]
    modes: dict[str, ModeResult]
    graph_count: int
    graph_breaks: list[dict[str, Any]]
    eager_latency_ms: dict[str, dict[str, float | None]]
    recommendation: dict[str, str]
    device: str
    dims: Dims
    seconds: float
    inductor_setup_s: float | None = None


    def summary(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "target_dims": self.dims.describe(),
            "graphs": self.graph_count,
            "graph_breaks": self.graph_breaks,
            "eager_latency_ms": self.eager_latency_ms,
            "modes": {m: r.to_dict() for m, r in self.modes.items()},
            "recommendation": self.recommendation,
            "inductor_setup_s": C.rounded(self.inductor_setup_s, 3),
            "cold_compile_note": ("first call on the example, compilation included, with inductor's on-disk "
                                  "caches as found: a mode compiled after another one reuses its kernels. "
                                  "cold_compile_cpu_s is its CPU time (this process and inductor's compile "
                                  "workers), which the machine's load does not inflate as it does the wall time. "
                                  "inductor_setup_s is inductor's one-time start (on a fresh machine it builds "
                                  "its C++ headers and cache), timed apart on a one-op function before any mode"),
            "seconds": round(self.seconds, 3),
        }


# Graph breaks -------------------------------------------------------------------------------------

def _break_reason(reason: str) -> str:
    lines = [line.strip() for line in str(reason).strip().splitlines() if line.strip()]
    if not lines:
        return "unknown reason"
    head = lines[0]
    explanation = next((line[len("Explanation:"):].strip() for line in lines if line.startswith("Explanation:")), "")
    if head.startswith("generic_jump"):
        return "a Python branch on a tensor value (dynamo cannot decide it at compile time)"
    return f"{head}: {explanation}" if explanation else head


def _graph_breaks(model: Any, example: Variant) -> tuple[int, list[dict[str, Any]], list[Finding]]:
    import torch

    torch._dynamo.reset()
    with torch.no_grad(), C.quiet(), C.WarningLog():
        explained = torch._dynamo.explain(model)(*example.args, **example.kwargs)
    breaks, findings, seen = [], [], set()
    for br in explained.break_reasons:
        frame = C.user_frame(list(br.user_stack or []))
        path, line = (frame.filename, frame.lineno) if frame else (None, None)
        reason = _break_reason(br.reason)
        if (path, line, reason) in seen:
            continue
        seen.add((path, line, reason))
        breaks.append({"reason": reason, "path": C.short_path(path), "line": line})
        src = C.source_line(path, line)
        findings.append(C.finding(GRAPH_BREAK, "torch.compile breaks the graph here"
                                 + (f" (`{src}`)" if src else "") + f": {reason}", path=path, line=line,
                                 fix="move the Python-only code out of forward, or use torch.where / torch.cond "
                                     "for branches on tensor values"))
    torch._dynamo.reset()
    return explained.graph_count, breaks, findings


# Modes -----------------------------------------------------------------------------------------

def _metrics() -> list[Any]:
    from torch._dynamo.utils import get_compilation_metrics

    return get_compilation_metrics()


def _run_mode(mode: str, model: Any, variants: list[Variant], refs: dict[str, list], timing: dict[str, Variant],
              device: str, budget_s: float) -> ModeResult:
    import torch
    from torch._dynamo.utils import clear_compilation_metrics

    result = ModeResult(mode)
    torch._dynamo.reset()
    clear_compilation_metrics()
    compiled = torch.compile(model, mode=None if mode == "default" else mode)
    example = variants[0]
    log = C.WarningLog()
    with log, torch.no_grad(), C.quiet():
        start, cpu_start = time.perf_counter(), cpu_seconds()
        try:
            compiled(*example.args, **example.kwargs)
            T.sync(device)
        except Exception as exc:
            result.status, result.error = "failed", exc
            result.reason = C.first_line(exc, 300)
            torch._dynamo.reset()
            return result
        result.cold_compile_s = time.perf_counter() - start
        result.cold_compile_cpu_s = cpu_seconds() - cpu_start
        seen = len(_metrics())
        for v in variants:
            try:
                out = compiled(*v.args, **v.kwargs)
                T.sync(device)
            except Exception as exc:
                result.parity.append({"name": v.name, "status": "error", "problem": C.first_line(exc, 240)})
                continue
            tensors, _ = C.output_leaves(out)
            cmp = C.compare(refs[v.name], [t for _, t in tensors])
            entry = {"name": v.name, "status": "ok" if cmp.ok else "mismatch",
                     "max_abs_err": C.rounded(cmp.max_abs_err), "max_rel_err": C.rounded(cmp.max_rel_err)}
            if cmp.problem and not cmp.ok:
                entry["problem"] = cmp.problem
            result.parity.append(entry)
            metrics = _metrics()
            for m in metrics[seen:]:
                if m.recompile_reason:
                    reason = re.sub(r"^\s*\d+/\d+: ", "", m.recompile_reason.strip().splitlines()[0])
                    result.recompiles.append(Recompile(
                        v.name, f"{m.co_name} ({C.short_path(m.co_filename)}:{m.co_firstlineno})", reason,
                        m.co_filename, m.co_firstlineno))
                if m.fail_reason and "recompile_limit" in str(m.fail_reason):
                    result.hit_limit = True
            seen = len(metrics)
        result.latency_ms = _paired_latency(model, compiled, timing, device, budget_s)
    if any("recompile_limit" in w.message for w in log.caught):
        result.hit_limit = True
    bad = [p for p in result.parity if p["status"] != "ok"]
    if bad:
        result.status = "mismatch"
        result.reason = f"differs from eager on {', '.join(p['name'] for p in bad)}: {bad[0].get('problem')}"
    else:
        result.status = "ok"
        result.reason = (f"matches eager on {len(result.parity)} input variants; "
                         f"{len(result.recompiles)} recompilation{'s' * (len(result.recompiles) != 1)}")
    torch._dynamo.reset()
    return result


def _paired_latency(model: Any, compiled: Any, timing: dict[str, Variant], device: str,
                    budget_s: float) -> dict[str, dict[str, Any]]:
    """Per timing input: the compiled mode's p50/p99 and CPU ms per call, eager's timed in the same
    rounds, and the paired speed-up eager / mode (wall and CPU) with its 95% interval."""
    out: dict[str, dict[str, Any]] = {}
    for label, v in timing.items():
        def call(fn: Any, v: Variant = v) -> None:
            fn(*v.args, **v.kwargs)
            T.sync(device)
        try:
            p = paired(lambda: call(model), lambda: call(compiled), 2 * budget_s)
        except Exception as exc:
            out[label] = {"p50": None, "p99": None, "error": C.first_line(exc, 160)}
            continue
        out[label] = {**p["other"], "eager_p50": p["baseline"]["p50"], "eager_cpu_ms": p["baseline"]["cpu_ms"],
                      "speedup": p["speedup"], "cpu_speedup": p["cpu_speedup"], "rounds": p["rounds"]}
    return out


# Recommendation -------------------------------------------------------------------------------------

def _interval(entry: dict[str, Any] | None) -> tuple[float, float, float] | None:
    sp = (entry or {}).get("speedup")
    return (sp["ratio"], sp["low"], sp["high"]) if sp else None


def _intervals_text(options: dict[str, tuple[float, float, float]]) -> str:
    return ", ".join(f"{m} {r:.2f}x [{lo:.2f}, {hi:.2f}]" for m, (r, lo, hi) in options.items())


def recommend(modes: dict[str, ModeResult], eager: dict[str, dict[str, Any]], timing: dict[str, Variant],
              device: str, dims: Dims) -> dict[str, str]:
    """One sentence per scenario from the paired speed-ups (eager / mode, wall time, 95% interval):
    a mode when its interval's lower end clears ``1 + MARGIN``, no recommendation otherwise.

    Two outcomes only: a third ("stay in eager" when every upper end is under the margin) flipped
    run to run for a model with no gain, whose interval sits on the margin (a 1024x1024 Linear: 1.02x
    [0.92, 1.14] in one run, 0.95x [0.84, 1.09] in the next, on a loaded 2-core machine)."""
    out: dict[str, str] = {}
    usable = {m: r for m, r in modes.items() if r.status == "ok"}
    labels = list(timing)
    scenarios = {"latency": labels[1] if len(labels) > 1 and labels[1] != labels[-1] else labels[0],
                 "throughput": labels[-1]}
    bar = 1 + MARGIN
    for scenario, label in scenarios.items():
        what = "small batches, latency-critical" if scenario == "latency" else "large batches, throughput"
        options = {m: iv for m, r in usable.items() if (iv := _interval(r.latency_ms.get(label))) is not None}
        if not options:
            out[scenario] = f"{what} ({label}): no compile mode could be measured; stay in eager"
            continue
        intervals = _intervals_text(options)
        clear = {m: iv for m, iv in options.items() if iv[1] >= bar}
        if clear:
            best = max(clear, key=lambda m: clear[m][0])
            if "default" in clear and clear["default"][0] >= clear[best][0] * (1 - NOISE):
                best = "default"  # within 10% of the fastest: the mode without autotuning compiles faster
            r = usable[best]
            entry = r.latency_ms[label]
            cpu = entry.get("cpu_speedup")
            text = (f"{what} ({label}): mode={best!r}, {entry['p50']:.3g} ms p50 vs eager {entry['eager_p50']:.3g} ms "
                    f"timed in the same rounds: {clear[best][0]:.2f}x faster, 95% interval [{clear[best][1]:.2f}, "
                    f"{clear[best][2]:.2f}] (clears the {bar:.2f}x margin)"
                    + (f"; CPU time per call {cpu['ratio']:.2f}x [{cpu['low']:.2f}, {cpu['high']:.2f}]" if cpu else "")
                    + f"; after a cold compile of {r.cold_compile_cpu_s or 0:.1f} CPU seconds")
            if r.recompiles:
                text += (f" and {len(r.recompiles)} recompilation{'s' * (len(r.recompiles) != 1)} over the varied "
                         "inputs (mark the varying dimensions dynamic to compile once)")
            if best in CUDAGRAPH_MODES and dims.dims:
                text += f"; {CUDAGRAPH_NOTE}: pad or bucket the {'/'.join(dims.dims)} sizes"
        else:
            slower = all(iv[2] < 1 for iv in options.values())
            text = (f"{what} ({label}): no recommendation: noise; no mode's interval clears the {bar:.2f}x margin "
                    f"(eager / mode, timed in the same rounds, 95%: {intervals})"
                    + ("; every mode measured slower than eager here, so compiling buys nothing for this input"
                       if slower else ""))
        out[scenario] = text
    if usable and not device.startswith("cuda"):
        out["cuda_graphs"] = (f"not measured (model on {device}): {CUDAGRAPH_NOTE}; on CUDA, reduce-overhead "
                              "helps small latency-bound batches of a fixed shape most")
    return out


# Entry point ------------------------------------------------------------------------------------------

def compile_check(target: Target, modes: tuple[str, ...] | None = None, budget_s: float = T.BUDGET_S,
                  progress: Callable[[str], None] | None = None, threads: int | None = None) -> CompileReport:
    """Graph breaks, then per mode: cold compile, recompiles, parity and warm latency.

    ``threads``: torch's intra-op threads for the whole check (None: as configured).
    """
    with C.torch_threads(threads):
        return _compile_check(target, modes, budget_s, progress)


def _compile_check(target: Target, modes: tuple[str, ...] | None, budget_s: float,
                   progress: Callable[[str], None] | None) -> CompileReport:
    start = time.perf_counter()
    note = progress or (lambda s: None)
    model = target.model
    device = C.model_device(model)
    if modes is None:
        modes = CPU_MODES + (CUDA_MODES if device.startswith("cuda") else ())
    findings: list[Finding] = []
    if model.training:
        model.eval()  # export-check reports training mode (TP702); latency is measured for inference
    dims, _, eager = eager_inputs(model, target.args, target.kwargs)
    timing = T.latency_inputs(eager.valid, dims)
    note("eager latency")
    eager_ms = T.eager_latency(model, eager.valid, dims, device, budget_s)
    note("graph breaks")
    try:
        graph_count, breaks, break_findings = _graph_breaks(model, eager.valid[0])
    except Exception as exc:
        graph_count, breaks, break_findings = None, [], [C.finding(
            COMPILE_FAILED, f"torch._dynamo.explain failed: {C.first_line(exc, 240)}", subject="explain")]
    findings += break_findings
    results: dict[str, ModeResult] = {}
    setup_s = None
    if graph_count == 0:
        finding = _nothing_compiled(model)
        findings.append(finding)
        results = {m: ModeResult(m, "skipped", "dynamo captured no graph, so this mode would run eagerly (TP855)")
                   for m in modes}
        recommendation = {"all": "no recommendation: torch.compile captured no graph, so every mode runs "
                                 "the model eagerly (see TP855)"}
    else:
        for mode in modes:
            if mode in CUDAGRAPH_MODES and not device.startswith("cuda"):
                results[mode] = ModeResult(mode, "skipped", f"uses CUDA graphs; the model is on {device}")
                continue
            if setup_s is None:
                note("inductor setup")
                setup_s = _inductor_setup(device)
            note(f"mode {mode}")
            results[mode] = _run_mode(mode, model, eager.valid, eager.refs, timing, device, budget_s)
        findings += _mode_findings(results)
        recommendation = recommend(results, eager_ms, timing, device, dims)
    return CompileReport(findings=findings, modes=results, graph_count=graph_count or 0, graph_breaks=breaks,
                         eager_latency_ms=eager_ms, recommendation=recommendation, device=device, dims=dims,
                         seconds=time.perf_counter() - start, inductor_setup_s=setup_s)


def _inductor_setup(device: str) -> float | None:
    """Seconds of inductor's one-time start (imports, C++ headers and caches on a fresh machine),
    paid here on a one-op function so that no mode's cold compile includes it."""
    import torch

    start = time.perf_counter()
    try:
        with torch.no_grad(), C.quiet(), C.WarningLog():
            torch.compile(lambda x: x * 2 + 1)(torch.ones(4, device=device))
            T.sync(device)
    except Exception:
        return None  # the modes report the compiler's failure with its reason
    finally:
        torch._dynamo.reset()
    return time.perf_counter() - start


def _nothing_compiled(model: Any) -> Finding:
    """TP855, with the recurrent modules dynamo skips while allow_rnn is off, when there are some."""
    import torch

    rnns = [n or type(model).__name__ for n, m in model.named_modules() if isinstance(m, torch.nn.RNNBase)]
    if rnns and not torch._dynamo.config.allow_rnn:
        kinds = sorted({type(m).__name__ for m in model.modules() if isinstance(m, torch.nn.RNNBase)})
        message = (f"torch.compile captured no graph: dynamo skips {'/'.join(kinds)} modules "
                   f"({', '.join(rnns[:3])}{', ...' if len(rnns) > 3 else ''}) while "
                   f"torch._dynamo.config.allow_rnn is False (its default on torch {torch.__version__}), so every "
                   "mode runs the "
                   "model eagerly; no mode was measured and none is recommended")
        fix = "set torch._dynamo.config.allow_rnn = True before torch.compile (then check parity), or do not compile"
    else:
        message = ("torch.compile captured no graph (dynamo skipped every frame of forward), so every mode runs "
                   "the model eagerly; no mode was measured and none is recommended")
        fix = "run with TORCH_LOGS=dynamo to see why dynamo skips the frames"
    return C.finding(NOTHING_COMPILED, message, subject=rnns[0] if rnns else None, fix=fix)


def _mode_findings(results: dict[str, ModeResult]) -> list[Finding]:
    out = []
    reported: set[tuple[str, str]] = set()
    for mode, r in results.items():
        if r.status == "failed":
            path, line = C.exception_location(r.error) if r.error else (None, None)
            out.append(C.finding(COMPILE_FAILED, f"torch.compile(mode={mode!r}) failed: {r.reason}", path=path,
                                line=line, subject=mode))
            continue
        bad = [p for p in r.parity if p["status"] != "ok"]
        if bad:
            worst = max((p.get("max_abs_err") or 0) for p in bad)
            how = "raises" if all(p["status"] == "error" for p in bad) else f"differs from eager by up to {worst:.3g}"
            severity = Severity.ERROR if any(p["status"] == "mismatch" for p in bad) else Severity.WARNING
            out.append(C.finding(COMPILE_PARITY, f"torch.compile(mode={mode!r}) {how}"
                                 f" on {', '.join(p['name'] for p in bad)}: {bad[0].get('problem')}", subject=mode,
                                 severity=severity))
        by_function: dict[str, list[Recompile]] = {}
        for rc in r.recompiles:
            by_function.setdefault(rc.function, []).append(rc)
        for function, rcs in by_function.items():
            new = [rc for rc in rcs if (function, rc.reason) not in reported]
            if not new:
                continue  # the same recompilations in another mode
            reported.update((function, rc.reason) for rc in rcs)
            guards = "; ".join(f"{rc.variant}: {rc.reason}" for rc in new)
            out.append(C.finding(RECOMPILE, f"torch.compile (mode={mode!r}) recompiled {function} "
                                f"{len(new)} time{'s' * (len(new) != 1)} over the varied inputs; guard failed: {guards}"
                                + ("; it hit recompile_limit and runs eagerly from then on" if r.hit_limit else ""),
                                severity=Severity.WARNING if r.hit_limit else Severity.INFO, subject=function,
                                path=new[0].path, line=new[0].line,
                                fix="mark the varying dimension dynamic (torch._dynamo.mark_dynamic(x, dim) or "
                                    "dynamic=True), or pad/bucket sizes"))
    return out
