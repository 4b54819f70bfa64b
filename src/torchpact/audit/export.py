"""export-check: every way to ship a model, each compared with eager on varied inputs.

The paths are ``torch.jit.trace``, ``torch.jit.script``, ``torch.export.export`` (batch, sequence,
time and image height/width dimensions marked ``Dim.AUTO``; non-strict, torch 2.13's default, and strict) and ``torch.onnx.export``
(2.13's default exporter, which runs torch.export) run in onnxruntime. Each artifact is built from
the example, then run on every variant of :mod:`torchpact.audit.variants` and compared with eager.
This module computes plain data (:class:`PathResult`) and :class:`~torchpact.findings.Finding`
objects; the reporters present them.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import re
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from torchpact.audit import _common as C
from torchpact.audit import timing as T
from torchpact.audit.target import Target
from torchpact.audit.variants import (
    EXAMPLE,
    SHAPE,
    VALUE,
    Dims,
    Variant,
    flatten_inputs,
    infer_dims,
    make_variants,
)
from torchpact.findings import Category, Finding, Severity
from torchpact.checks import Check

PATHS = ("trace", "script", "export", "onnx")
OK, MISMATCH, FAILED, SKIPPED = "ok", "mismatch", "failed", "skipped"
ONNX_HINT = "pip install 'torchpact[export]' (onnx, onnxscript, onnxruntime)"

_RUNTIME = "\n\n(Found by `torchpact export-check`, which builds the artifact and runs it on varied inputs.)"

TRACE_BRANCH = Check(
    code="TP701", category=Category.EXPORT, severity=Severity.ERROR,
    severity_note="`warning` when trace or export raises on a data-dependent branch (it fails loudly instead of baking the branch in)",
    summary="The traced model gives other results than eager on other inputs: trace baked in a branch or number taken from tensor values.",
    doc="""## What it does
`torchpact export-check` traces the model on the example, runs the trace on other values of the
same shape, and compares with eager. When the trace disagrees and torch emitted a `TracerWarning`
while tracing, the finding names the model line the warning came from (a Python `if` on a tensor,
`int(t)` / `.item()` / `.tolist()` of a tensor). torch.export and the default ONNX exporter refusing
such a branch (`GuardOnDataDependentSymNode`) is reported under the same code.

## Why is this bad?
On torch 2.13 `torch.jit.trace` runs `forward` once and records only tensor operations: the branch
the example took, and any number read from a tensor, become constants. torch only warns
(`TracerWarning: Converting a tensor to a Python boolean might cause the trace to be incorrect`), and
the traced model silently returns wrong results for inputs that would have taken the other branch.

## How to fix
Express the branch with tensor operations (`torch.where`, masking, `torch.clamp`), use `torch.cond`
with torch.export, or script the branching part.""" + _RUNTIME)

TRAINING_MODE = Check(
    code="TP702", category=Category.EXPORT, severity=Severity.WARNING,
    summary="The model was handed over in training mode with live Dropout/BatchNorm.",
    doc="""## What it does
Before exporting, `torchpact export-check` looks at the model as the target returned it: in training
mode, with Dropout or BatchNorm layers, it calls the model twice on the example (RNG and buffers
restored afterwards) and in eval mode once, and reports what differs.

## Why is this bad?
Every exporter records the mode it finds. In training mode Dropout zeroes random activations (two
calls on the same input differ) and BatchNorm normalises with the batch's own statistics (a sample's
output depends on the rest of the batch), so the artifact is nondeterministic and batch-dependent.
torchpact compares the paths in eval mode after reporting this.

## How to fix
Call `model.eval()` before exporting.""" + _RUNTIME)

TRACE_SHAPE = Check(
    code="TP751", category=Category.EXPORT, severity=Severity.ERROR,
    summary="The traced model breaks on another batch size, sequence length or image size: trace specialised a shape.",
    doc="""## What it does
Runs the traced model on other batch sizes, sequence or time lengths and image heights/widths (the
example's values repeated) and compares with eager. Reports a disagreement or an error that only other shapes cause, with the model
line of the `TracerWarning` emitted while tracing, when there was one.

## Why is this bad?
`torch.jit.trace` records sizes read into Python (`int(x.shape[0])`, `x.size(1) // 2` passed to a
Python function, `range(x.shape[0])` loops, `list(x.shape)`) as constants of the example. The trace
then returns results of the wrong size or wrong values for other shapes, or fails inside the graph.

## How to fix
Keep sizes as tensor expressions (`x.shape[0]` passed straight to torch ops, `-1` in `view`), avoid
loops over a dimension, or use `torch.export.export` with dynamic shapes.""" + _RUNTIME)

EXPORT_SPECIALISED = Check(
    code="TP752", category=Category.EXPORT, severity=Severity.WARNING,
    severity_note="`error` when the ONNX model accepts the other sizes but returns wrong results",
    summary="torch.export silently fixed a dimension torchpact marked dynamic (Dim.AUTO) to the example's size.",
    doc="""## What it does
Exports with the batch, sequence, time and image height/width dimensions marked `torch.export.Dim.AUTO`
(each kept only where eager accepts other sizes) and reads the exported
program's input shapes: a dimension that came out as a number was specialised. The finding names the
model line that caused it when torch reported one.

## Why is this bad?
With `Dim.AUTO` torch 2.13 does not raise when the code forces a size (a Python comparison on
`x.shape[0]`, a reshape to a literal): it quietly exports a program for the example's size only.
Calling it with another size raises `Guard failed: x.size()[0] == 2`, and the ONNX model built from
it (the default `torch.onnx.export` runs torch.export) declares the fixed size too.

## How to fix
Remove the size-specific code at the named line, or pass `Dim("batch")` to make torch.export raise
with the reason; if one size is intended, mark the dimension `Dim.STATIC`.""" + _RUNTIME)

OUTPUT_TYPE = Check(
    code="TP753", category=Category.EXPORT, severity=Severity.WARNING,
    severity_note="`info` when the output is a dict, which torch.jit.trace refuses by default: torchpact traced with strict=False",
    summary="The model returns an object (cache, dict) that an export path cannot carry.",
    doc="""## What it does
Inspects the eager output for objects that are not tensors, plain containers or types registered
with torch's pytree (a Hugging Face `DynamicCache`, a custom result class), and explains the path
errors they cause.

## Why is this bad?
On torch 2.13 `torch.export.export` (and the default ONNX exporter) raise `Found <class ...> in
output, which is not a known type`; `torch.jit.trace` raises `Tracer cannot infer type of ...`, and
by default (`strict=True`) refuses dict outputs (`Encountering a dict at the output of the tracer`).

## How to fix
Return tensors only: for Hugging Face models pass `use_cache=False` (no cache object) and
`return_dict=False` (a tuple), or register the type with `torch.utils._pytree.register_pytree_node`
for torch.export; `torch.jit.trace(..., strict=False)` accepts dict outputs.""" + _RUNTIME)

ONNX_NUMERICS = Check(
    code="TP754", category=Category.EXPORT, severity=Severity.WARNING,
    summary="The ONNX model run in onnxruntime differs from eager beyond tolerance.",
    doc="""## What it does
Runs the ONNX model from `torch.onnx.export` in onnxruntime on every variant and compares with eager:
a difference above `1e-5 + 1e-4 * max|eager|` while the torch.export program agrees is an
ONNX-specific numeric mismatch.

## Why is this bad?
The ONNX graph uses onnxruntime's kernels and the exporter's decompositions and fusions; a
mismatch beyond float rounding means the deployed model computes something else than the trained one.

## How to fix
Look at the variant that broke it (large values often expose a fused or approximated op), try
`optimize=False`, another opset, or keep the op in higher precision.""" + _RUNTIME)

JIT_DEPRECATED = Check(
    code="TP755", category=Category.EXPORT, severity=Severity.INFO,
    summary="torch.jit.trace / torch.jit.script are deprecated on torch 2.13.",
    doc="""## What it does
Reports the `DeprecationWarning` torch 2.13 raises when the TorchScript paths are used.

## Why is this bad?
torch 2.13 warns ``torch.jit.trace` is deprecated. Please switch to `torch.compile` or
`torch.export`.`` (and the same for `torch.jit.script`): TorchScript gets no new features.

## How to fix
Ship with `torch.export.export` (or the default `torch.onnx.export`, built on it).""" + _RUNTIME)

PATH_FAILED = Check(
    code="TP756", category=Category.EXPORT, severity=Severity.WARNING,
    severity_note="`info` when the failed path is torch.jit.trace or torch.jit.script (deprecated), `warning` for torch.export and ONNX",
    summary="An export path raised while building the artifact.",
    doc="""## What it does
Reports the error a path raised on the example (torch.export, ONNX: warning; the deprecated
TorchScript paths: info), with the model line where the traceback shows one.

## Why is this bad?
The model cannot be shipped this way as it is written.

## How to fix
Follow the reason; torch.export failures are listed in `torch.export.draft_export` with more detail.""" + _RUNTIME)

PATH_DIFFERS = Check(
    code="TP757", category=Category.EXPORT, severity=Severity.ERROR,
    severity_note="`warning` when the path raises on the varied inputs instead of returning wrong values",
    summary="An artifact gives other results than eager (or raises) on an input eager accepts.",
    doc="""## What it does
Reports a disagreement between an artifact and eager on a variant that no more specific finding
explains. Artifacts that raise on another number of images in a list input are reported once, for
all paths together.

## Why is this bad?
The shipped model would return other results than the one tested in Python. On torch 2.13 the
length of a list input is part of the input structure trace, torch.export and ONNX are built for:
a detector exported on two images raises on one or five, where eager takes any number.

## How to fix
Reproduce with the variant named in the finding and compare the intermediate outputs.""" + _RUNTIME)

CHECKS = (TRACE_BRANCH, TRAINING_MODE, TRACE_SHAPE, EXPORT_SPECIALISED, OUTPUT_TYPE, ONNX_NUMERICS,
          JIT_DEPRECATED, PATH_FAILED, PATH_DIFFERS)


def _finding(check: Check, message: str, severity: Severity | None = None, path: str | None = None,
             line: int | None = None, subject: str | None = None, fix: str | None = None) -> Finding:
    return Finding(code=check.code, category=check.category, severity=severity or check.severity,
                   message=message, path=C.short_path(path), line=line, subject=subject, fix=fix,
                   evidence=check.evidence)


# Results -----------------------------------------------------------------------------------------

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


# Eager -------------------------------------------------------------------------------------------

class _Eager:
    """Eager outputs of every valid variant (a variant eager itself rejects is dropped)."""

    def __init__(self, model: Any, variants: list[Variant]) -> None:
        import torch

        self.refs: dict[str, list[tuple[str, Any]]] = {}
        self.foreign: list[tuple[str, str]] = []
        self.valid: list[Variant] = []
        self.invalid: dict[str, str] = {}
        for v in variants:
            try:
                with torch.no_grad(), C.quiet():
                    out = model(*v.args, **v.kwargs)
            except Exception as exc:  # the variant is not an input this model takes
                if v.kind == EXAMPLE:
                    raise
                self.invalid[v.name] = "eager raised " + C.first_line(exc, 160)
                continue
            tensors, foreign = C.output_leaves(out)
            self.refs[v.name] = [(n, t.detach().clone()) for n, t in tensors]
            if v.kind == EXAMPLE:
                self.foreign = foreign
            self.valid.append(v)


def eager_inputs(model: Any, args: tuple, kwargs: dict[str, Any]) -> tuple[Dims, list[Variant], _Eager]:
    """The inferred dims (candidates eager rejects dropped), all variants, and eager's outputs.

    A rejected variant along a dropped candidate axis (the features of an ``(N, T, F)`` input) was a
    guess, not an input the model should take: it is not listed as invalid.
    """
    dims = infer_dims(args, kwargs)
    variants = make_variants(args, kwargs, dims)
    eager = _Eager(model, variants)
    accepted = dims.accepted(eager.valid)
    dropped = set(dims.dims) - set(accepted.dims)
    by_name = {v.name: v for v in variants}
    eager.invalid = {n: r for n, r in eager.invalid.items() if by_name[n].dim not in dropped}
    return accepted, [v for v in variants if v.dim not in dropped], eager


def _mode_dependent(model: Any) -> tuple[list[str], list[str]]:
    from torch import nn

    drops = [n or type(model).__name__ for n, m in model.named_modules()
             if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0 and m.training]
    norms = [n or type(model).__name__ for n, m in model.named_modules()
             if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training]
    return drops, norms


def _training_mode(model: Any, example: Variant, path: str | None, line: int | None) -> Finding | None:
    """TP702 when the model is in training mode and that changes what it computes; puts it in eval mode."""
    import copy

    import torch

    if not model.training:
        return None
    drops, norms = _mode_dependent(model)
    if not drops and not norms:
        return None
    state = copy.deepcopy({k: v for k, v in model.state_dict().items()})
    evidence = []
    try:
        with torch.random.fork_rng(), torch.no_grad(), C.quiet():
            torch.manual_seed(0)
            a, _ = C.output_leaves(model(*example.args, **example.kwargs))
            b, _ = C.output_leaves(model(*example.args, **example.kwargs))
            model.eval()
            e, _ = C.output_leaves(model(*example.args, **example.kwargs))
        if drops and not C.compare(a, [t for _, t in b]).ok:
            evidence.append("two calls on the same input gave different outputs (dropout is live)")
        cmp = C.compare(a, [t for _, t in e])
        if norms and not cmp.ok:
            evidence.append("BatchNorm normalises with the batch's own statistics, so each output depends on "
                            f"the rest of the batch (train vs eval output differs by up to {cmp.max_abs_err:.3g})")
    except Exception:
        pass
    finally:
        model.load_state_dict(state)
        model.eval()
    layers = []
    if drops:
        layers.append(f"{len(drops)} Dropout layer{'s' * (len(drops) != 1)} ({', '.join(drops[:3])}{', ...' if len(drops) > 3 else ''})")
    if norms:
        layers.append(f"{len(norms)} BatchNorm layer{'s' * (len(norms) != 1)} ({', '.join(norms[:3])}{', ...' if len(norms) > 3 else ''})")
    message = (f"the model was handed over in training mode with {' and '.join(layers)}: "
               + ("; ".join(evidence) if evidence else "they behave as in training")
               + ". Every exporter records this mode, so the artifact would too; torchpact checked the paths in eval mode")
    return _finding(TRAINING_MODE, message, path=path, line=line, subject=", ".join((drops + norms)[:4]),
                    fix="call `model.eval()` before exporting")


# Paths -------------------------------------------------------------------------------------------

class _Bound:
    """Calls the model with the example's non-tensor inputs fixed; takes the tensors positionally."""

    @staticmethod
    def make(model: Any, example: Variant) -> Any:
        import torch

        leaves, spec = flatten_inputs(example.args, example.kwargs)
        index = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]

        class Bound(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, *tensors):
                from torch.utils import _pytree

                if len(tensors) != len(index):
                    raise ValueError(f"the artifact takes the example's input structure ({len(index)} tensors), "
                                     f"not {len(tensors)}")
                filled = list(leaves)
                for i, t in zip(index, tensors):
                    filled[i] = t
                args, kwargs = _pytree.tree_unflatten(filled, spec)
                return self.model(*args, **kwargs)

        return Bound()


def _positional_only(example: Variant) -> bool:
    import torch

    return not example.kwargs and all(isinstance(a, torch.Tensor) for a in example.args)


def _build_trace(model: Any, example: Variant, result: PathResult) -> Callable[[Variant], Any]:
    import torch

    plain = _positional_only(example)
    fn = model if plain else _Bound.make(model, example)
    inputs = tuple(example.args) if plain else tuple(example.tensors())
    try:
        traced = torch.jit.trace(fn, inputs, check_trace=False)
    except RuntimeError as exc:
        if "at the output of the tracer" not in str(exc):
            raise
        # HF-style dict outputs: the default strict=True refuses them; strict=False traces them
        result.detail["strict_error"] = C.first_line(exc, 200)
        traced = torch.jit.trace(fn, inputs, check_trace=False, strict=False)
        result.detail["traced_with"] = "strict=False"
    return lambda v: traced(*(v.args if plain else v.tensors()))


def _build_script(model: Any, example: Variant, result: PathResult) -> Callable[[Variant], Any]:
    import torch

    scripted = torch.jit.script(model)
    return lambda v: scripted(*v.args, **v.kwargs)


def _exportable(model: Any, example: Variant, dims: Dims) -> tuple[Any, tuple, Any, Callable[[Any, Variant], Any]]:
    """(module, args, dynamic_shapes, call) for torch.export / ONNX.

    Tensor-only positional inputs go to the model itself. Otherwise the model is wrapped so that only
    tensors are inputs and the rest (``use_cache=False``, ``return_dict=False``...) are constants of
    the graph: torch 2.13's dynamic_shapes matching fails on non-tensor values inside ``**kwargs``.
    ``Dim.AUTO`` marks the inferred batch/sequence dimensions.
    """
    from torch.export import Dim

    tensors = example.tensors()
    specs = []
    leaf_of = _tensor_leaf_indices(example)
    for i in leaf_of:
        marked = dims.of_leaf(i)
        specs.append({d: Dim.AUTO for d in marked} or None)
    if _positional_only(example):
        return model, tuple(example.args), (tuple(specs) if dims.dims else None), lambda m, v: m(*v.args)
    return (_Bound.make(model, example), tuple(tensors), ((tuple(specs),) if dims.dims else None),
            lambda m, v: m(*v.tensors()))


def _tensor_leaf_indices(example: Variant) -> list[int]:
    import torch

    leaves, _ = flatten_inputs(example.args, example.kwargs)
    return [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]


def input_names(model: Any, example: Variant) -> list[str]:
    """A readable name per flattened input leaf: the forward parameter (``input_ids``,
    ``attention_mask``), with the path inside it for nested inputs."""
    from torch.utils import _pytree

    try:
        params = [p.name for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = []
    for path, _ in _pytree.tree_flatten_with_path((tuple(example.args), dict(example.kwargs)))[0]:
        top, rest = path[0].idx, path[1:]
        if top == 0:
            i = rest[0].idx
            base = params[i] if i < len(params) else f"args[{i}]"
        else:
            base = str(rest[0].key)
        names.append(base + "".join(str(k) for k in rest[1:]))
    return names


class _Specialisations(logging.Handler):
    """Collects torch's 'Specializing <source> to <n>' events with the model line at that moment."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.events: list[tuple[str, Any, str | None, int | None]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not str(record.msg).startswith("Specializing"):
            return
        try:
            from torch._guards import TracingContext

            stack = list(TracingContext.extract_stack() or [])
        except Exception:
            stack = []
        frame = C.user_frame(stack) or C.user_frame(traceback.extract_stack()[:-1])
        source, value = (record.args + (None, None))[:2] if isinstance(record.args, tuple) else (None, None)
        self.events.append((str(source), value, frame.filename if frame else None, frame.lineno if frame else None))


def _export(module: Any, args: tuple, dynamic_shapes: Any, strict: bool, events: _Specialisations) -> Any:
    import torch
    import torch.fx.experimental._config as fx_config

    logger = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    handlers, propagate = logger.handlers[:], logger.propagate
    logger.handlers, logger.propagate = [events], False  # torch would print each event on stderr
    try:
        with fx_config.patch(print_specializations=True):
            return torch.export.export(module, args, dynamic_shapes=dynamic_shapes, strict=strict)
    finally:
        logger.handlers, logger.propagate = handlers, propagate


def _specialised(model: Any, ep: Any, example: Variant, dims: Dims) -> list[dict[str, Any]]:
    """The marked dimensions the exported program fixed to a number."""
    from torch.export.graph_signature import InputKind, TensorArgument
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    names = input_names(model, example)
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    user = [s.arg.name for s in ep.graph_signature.input_specs
            if s.kind == InputKind.USER_INPUT and isinstance(s.arg, TensorArgument)]
    out = []
    for i, pname in zip(_tensor_leaf_indices(example), user):
        val = placeholders[pname].meta.get("val")
        for d, dim_name in dims.of_leaf(i).items():
            size = val.shape[d] if val is not None else None
            if size is not None and is_concrete_int(size):
                out.append({"input": names[i], "dim": d, "name": dim_name, "size": int(size)})
    return out


def _build_export(model: Any, example: Variant, dims: Dims, result: PathResult,
                  strict: bool) -> Callable[[Variant], Any]:
    events = _Specialisations()
    module, args, dynamic_shapes, call = _exportable(model, example, dims)
    ep = _export(module, args, dynamic_shapes, strict, events)
    fixed = _specialised(model, ep, example, dims)
    for item in fixed:
        for source, value, path, line in events.events:
            if f"size()[{item['dim']}]" in source and str(value) == str(item["size"]):
                item["path"], item["line"] = path, line
                break
    result.detail.setdefault("specialised", fixed)
    exported = ep.module()
    return lambda v: call(exported, v)


def onnx_missing() -> list[str]:
    return [m for m in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(m) is None]


def _build_onnx(model: Any, example: Variant, dims: Dims, result: PathResult) -> Callable[[Variant], Any]:
    import torch

    module, args, dynamic_shapes, _ = _exportable(model, example, dims)
    program = torch.onnx.export(module, args, dynamic_shapes=dynamic_shapes, verbose=False)
    program.initialize_inference_session(_ort_session)
    inputs = len(program.model.graph.inputs)

    def run(v: Variant) -> Any:
        # the ONNX graph takes the tensor inputs only (constants are folded in), in flattened order;
        # onnxruntime rejects inputs the graph does not declare, where ONNXProgram's zip would drop them
        tensors = v.tensors()
        if len(tensors) != inputs:
            raise ValueError(f"the ONNX model declares {inputs} inputs and was fed {len(tensors)}")
        return program(*tensors)

    return run


def _ort_session(model: Any) -> Any:
    import onnxruntime as ort
    import torch

    ort.set_default_logger_severity(4)  # errors reach the report through the exception
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    # ORT's idle workers spin by default and would steal the cores eager is timed on afterwards
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _run_variants(result: PathResult, run: Callable[[Variant], Any], eager: _Eager) -> None:
    import torch

    for v in eager.valid:
        try:
            with torch.no_grad(), C.quiet():
                out = run(v)
        except Exception as exc:
            result.variants.append(VariantResult(v.name, v.kind, "error", problem=C.first_line(exc, 240)))
            continue
        tensors, _ = C.output_leaves(out)
        cmp = C.compare(eager.refs[v.name], [t for _, t in tensors])
        result.variants.append(VariantResult(v.name, v.kind, OK if cmp.ok else MISMATCH,
                                             cmp.max_abs_err, cmp.max_rel_err, cmp.problem))


def _latency(run: Callable[[Variant], Any], eager_call: Callable[[], Any], example: Variant,
             eager: dict[str, Any], budget_s: float) -> dict[str, Any]:
    """p50 / p99 ms of the artifact on the example against ``eager`` (timed in the clean state).

    Eager is timed again in rounds alternating with the artifact, so that both see the same machine
    load; when it no longer runs at its clean-state speed, the two are said to be unstable rather
    than compared. ``unstable`` says why, when so.
    """
    import torch

    with torch.no_grad(), C.quiet():
        now = T.timed({"eager": eager_call, "artifact": lambda: run(example)}, budget_s=budget_s)
    a = now["artifact"]
    out: dict[str, Any] = {"artifact": a.get("p50"), "eager": eager.get("p50"),
                           "artifact_p99": a.get("p99"), "eager_p99": eager.get("p99")}
    reasons = [f"artifact: {a.get('unstable') or a.get('error')}" if a.get("unstable") or a.get("error") else None,
               f"eager: {eager['unstable']}" if eager.get("unstable") else None,
               T.drift(eager, now["eager"])]
    why = "; ".join(r for r in reasons if r)
    if why:
        out["unstable"] = why
    return out


def _run_path(name: str, build: Callable[[PathResult], Callable[[Variant], Any]], eager: _Eager,
              example: Variant, latency: Callable[[Callable[[Variant], Any]], dict[str, Any]] | None) -> PathResult:
    """Build the artifact, run it on every variant, and time it with ``latency`` (None: not timed)."""
    result = PathResult(name)
    start = time.perf_counter()
    log = C.WarningLog()
    try:
        with log, C.quiet():
            run = build(result)
    except Exception as exc:
        result.status, result.error = FAILED, exc
        result.reason = _failure_reason(name, exc)
        result.warnings = log.caught
        result.seconds = time.perf_counter() - start
        return result
    result.warnings = log.caught
    with C.WarningLog():
        _run_variants(result, run, eager)
        if latency is not None:
            result.latency_ms = latency(run)
    broken = result.broken()
    if broken:
        result.status = MISMATCH
        first = broken[0]
        what = "raises" if first.status == "error" else "differs from eager"
        result.reason = (f"{what} on {', '.join(v.name for v in broken)}: {first.problem}")
    else:
        result.status = OK
        result.reason = f"matches eager on {len(result.variants)} input variants"
    result.seconds = time.perf_counter() - start
    return result


def _failure_reason(name: str, exc: BaseException) -> str:
    text = str(exc)
    m = re.search(r"Found <class '([^']+)'> in output, which is not a known type", text)
    if m:
        return f"the output holds a {m.group(1).rsplit('.', 1)[-1]} object, which torch.export cannot carry"
    m = re.search(r"Tracer cannot infer type of (\w+)", text)
    if m:
        return f"the output ({m.group(1)}) holds an object the tracer cannot carry"
    if "can be output from traced functions" in text:
        return "the output holds an object the tracer cannot carry (only tensors, lists, tuples and dicts of tensors)"
    if "Could not guard on data-dependent expression" in text:
        return "forward branches on a tensor value, which torch.export cannot decide at export time"
    m = re.search(r"Failed to get source for <function ([\w.<>]+)", text)
    if m:
        return (f"torch.jit.script needs the source of every function the model calls, and the source of "
                f"{m.group(1)} is not available")
    if "could not get source code" in text:
        return "torch.jit.script needs the source of every function the model calls, and some is not available"
    cause = exc.__cause__
    if name == "onnx" and cause is not None and type(exc).__name__ == "TorchExportError":
        return "torch.export (step 1 of the ONNX export) failed: " + _failure_reason("export", cause)
    if name == "onnx" and cause is not None and type(exc).__name__ == "ConversionError":
        while cause.__cause__ is not None:
            cause = cause.__cause__  # the root: usually "No ONNX function found for <OpOverload ...>"
        return "the exported program could not be translated to ONNX: " + C.first_line(cause, 240)
    return C.first_line(exc, 240)


# Findings ----------------------------------------------------------------------------------------

_TRACER_KINDS = (
    ("Python boolean", "branches on a tensor value (a Python `if`/`while` on a tensor)"),
    ("Python index", "uses a tensor as a Python index or size (e.g. `range(t)`, a loop over a dimension)"),
    ("Python number", "turns a tensor into a Python number"),
    ("Python integer", "turns a tensor into a Python integer"),
    ("Python float", "turns a tensor into a Python float"),
    ("Iterating over a tensor", "iterates over a tensor (a loop over its first dimension)"),
    ("registered as constants", "builds a tensor from Python values, which the trace keeps as a constant"),
)


def _tracer_kind(message: str) -> str:
    for key, words in _TRACER_KINDS:
        if key in message:
            return words
    return "does something the tracer cannot record"


def _trace_findings(trace: PathResult, where: tuple[str | None, int | None]) -> list[Finding]:
    import torch

    shape_broken, value_broken = trace.broken(SHAPE), trace.broken(VALUE)
    if trace.status != MISMATCH or not (shape_broken or value_broken):
        return []
    first = (value_broken or shape_broken)[0]
    evidence = (f"the trace {'raises' if first.status == 'error' else 'differs from eager'} on {first.name}"
                + (f" (max abs err {first.max_abs_err:.3g})" if first.max_abs_err is not None and first.status != "error" else "")
                + (f": {first.problem}" if first.problem and first.status == "error" else ""))
    check = TRACE_BRANCH if value_broken else TRACE_SHAPE
    fix = (check is TRACE_BRANCH and "express the branch with tensor ops (torch.where / masking) or torch.cond "
           "with torch.export; do not read tensor values into Python") or (
           "keep sizes inside tensor ops (x.shape[0] passed to torch, -1 in view), or ship with torch.export "
           "and dynamic shapes")
    seen: set[tuple[str | None, int | None]] = set()
    out = []
    for w in trace.warnings:
        if w.category is not torch.jit.TracerWarning or (w.path, w.line) in seen or w.path is None:
            continue
        seen.add((w.path, w.line))
        src = C.source_line(w.path, w.line)
        message = (f"torch.jit.trace baked in the example here: this line {_tracer_kind(w.message)}"
                   + (f" (`{src}`)" if src else "") + f", and {evidence}")
        out.append(_finding(check, message, path=w.path, line=w.line, fix=fix))
    if not out:
        what = "other values" if value_broken else "other shapes"
        out.append(_finding(check, f"torch.jit.trace specialised this model to the example ({what} break it; "
                                   f"torch emitted no TracerWarning to point at the line): {evidence}",
                            path=where[0], line=where[1], fix=fix))
    return out


def _rnn_fix() -> str:
    """The fix for a time length torch.export fixed through a recurrent module, on the torch this check ran on."""
    import torch

    return (f"torch.export (on torch {torch.__version__}, where this check saw it) fixes the time length an "
            "nn.LSTM / nn.GRU / nn.RNN runs over, whatever the dynamic_shapes say: pad sequences to one length, or "
            "export one program per length you serve")


def _export_findings(export: PathResult, onnx: PathResult | None, rnn: bool = False) -> list[Finding]:
    """TP752 per dimension the exported program fixed; ``rnn``: the model runs a recurrent module."""
    out = []
    strict_ok = export.detail.get("strict", {}).get("status") == OK
    for item in export.detail.get("specialised", []):
        src = C.source_line(item.get("path"), item.get("line"))
        broke = [v.name for v in export.broken() if v.name.startswith(item["name"] + "=")]
        onnx_broke = [v for v in (onnx.broken() if onnx is not None else []) if v.name.startswith(item["name"] + "=")]
        rejected = [v.name for v in onnx_broke if v.status == "error"]
        wrong = [v for v in onnx_broke if v.status != "error"]
        onnx_text = f"; the ONNX model rejects {', '.join(rejected)}" if rejected else ""
        onnx_ok = [v.name for v in (onnx.variants if onnx is not None and onnx.status != FAILED else [])
                   if v.name in broke and v.status == OK]
        if onnx_ok:
            onnx_text += f"; the ONNX model run in onnxruntime accepts {', '.join(onnx_ok)} and matches eager"
        if wrong:
            errs = [v.max_abs_err for v in wrong if v.max_abs_err is not None]
            onnx_text += (f"; the ONNX model accepts {', '.join(v.name for v in wrong)} but returns wrong results ("
                          + (f"max abs err {max(errs):.3g})" if errs else f"{wrong[0].problem})"))
        message = (f"torch.export silently fixed {item['input']}.shape[{item['dim']}] ({item['name']}, marked "
                   f"Dim.AUTO) to the example's {item['size']}"
                   + (f" because of this line (`{src}`)" if src else "")
                   + (f"; the exported program rejects {', '.join(broke)}" if broke else "")
                   + onnx_text
                   + ("; torch.export.export(..., strict=True) kept it dynamic" if strict_ok else ""))
        severity = Severity.ERROR if wrong else None  # a silently wrong ONNX model, not just a refusal
        out.append(_finding(EXPORT_SPECIALISED, message, severity=severity, path=item.get("path"), line=item.get("line"),
                            subject=f"{item['input']}.shape[{item['dim']}]",
                            fix=_rnn_fix() if rnn and item["name"] in ("time", "seq", "length") else
                            "remove the size-specific code, or mark the dimension Dim.STATIC if one size is intended"))
    return out


_CARRY = r"not a known type|cannot infer type of|can be output from traced functions|unrecognized type"


def _output_type_findings(eager: _Eager, paths: dict[str, PathResult]) -> list[Finding]:
    out = []
    foreign_types = sorted({t for _, t in eager.foreign})
    blocked = [n for n, p in paths.items() if p.status == FAILED and p.error is not None
               and re.search(_CARRY, _error_text(p.error))]
    for typ in foreign_types:
        where = [n for n, t in eager.foreign if t == typ]
        short = typ.rsplit(".", 1)[-1]
        cache = "cache" in short.lower()
        fix = ("pass `use_cache=False` (no cache object in the output)" if cache else
               "return tensors only, or register the type with torch.utils._pytree.register_pytree_node (torch.export)")
        fix += "; with Hugging Face models also `return_dict=False`"
        message = (f"the output holds a {short} object at {where[0]}"
                   + (f", which {', '.join(blocked)} cannot carry: they fail" if blocked else
                      ", which the export paths cannot carry"))
        out.append(_finding(OUTPUT_TYPE, message, subject=where[0], fix=fix))
    trace = paths.get("trace")
    if trace is not None and "strict_error" in trace.detail:
        out.append(_finding(OUTPUT_TYPE, "the output is a dict (or holds one): torch.jit.trace refuses it with its "
                            "default strict=True ('Encountering a dict at the output of the tracer'); torchpact "
                            "traced with strict=False", severity=Severity.INFO,
                            fix="return a tuple (Hugging Face: `return_dict=False`) or trace with strict=False"))
    return out


def _failure_findings(paths: dict[str, PathResult], covered: set[str]) -> list[Finding]:
    out = []
    branch: dict[tuple[str | None, int | None], list[str]] = {}
    for name, p in paths.items():
        if p.status != FAILED or name in covered or p.error is None:
            continue
        path, line = C.exception_location(p.error)
        if "Could not guard on data-dependent expression" in _error_text(p.error):
            branch.setdefault((path, line), []).append(_LABELS[name])
            continue
        severity = Severity.INFO if name in ("trace", "script") else Severity.WARNING
        out.append(_finding(PATH_FAILED, f"{_LABELS[name]} failed: {p.reason}", severity=severity, path=path,
                            line=line, subject=name))
    for (path, line), labels in branch.items():
        src = C.source_line(path, line)
        out.append(_finding(TRACE_BRANCH, f"{' and '.join(labels)} raise{'s' * (len(labels) == 1)} on this "
                            "data-dependent branch" + (f" (`{src}`)" if src else "")
                            + ": 'Could not guard on data-dependent expression'",
                            severity=Severity.WARNING, path=path, line=line,
                            fix="express the branch with tensor ops (torch.where / masking) or torch.cond"))
    return out


_LABELS = {"trace": "torch.jit.trace", "script": "torch.jit.script", "export": "torch.export.export",
           "onnx": "torch.onnx.export"}


def _error_text(exc: BaseException) -> str:
    parts, current, seen = [], exc, set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(str(current))
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def _mismatch_findings(paths: dict[str, PathResult], covered: set[str]) -> list[Finding]:
    out = []
    export = paths.get("export")
    for name, p in paths.items():
        broken = p.broken()
        if p.status != MISMATCH or name in covered or not broken:
            continue
        first = broken[0]
        if name == "onnx" and export is not None and export.status == OK and all(v.status == MISMATCH for v in broken):
            out.append(_finding(ONNX_NUMERICS, f"onnxruntime's result differs from eager by up to {p.max_abs_err:.3g} "
                                f"(relative {p.max_rel_err:.3g}) on {', '.join(v.name for v in broken)}, while the "
                                "torch.export program matches", subject="onnx",
                                fix="try optimize=False or another opset; keep the sensitive op in higher precision"))
            continue
        label = "the ONNX model" if name == "onnx" else _LABELS[name]
        verb = "raises" if first.status == "error" else "differs from eager"
        severity = Severity.WARNING if all(v.status == "error" for v in broken) else Severity.ERROR
        out.append(_finding(PATH_DIFFERS, f"{label} {verb} on {', '.join(v.name for v in broken)}: {first.problem}",
                            severity=severity, subject=name))
    return out


def _structure_findings(paths: dict[str, PathResult], variants: list[Variant]) -> list[Finding]:
    """One finding for the artifacts that raise on another number of images (a list input's length
    is part of the input structure trace, torch.export and ONNX are built for); those variants are
    then explained for the other findings."""
    counts = {v.name for v in variants if v.dim == "images"}
    if not counts:
        return []
    rejected: dict[str, list[str]] = {}
    for name, p in paths.items():
        names = [v.name for v in p.broken() if v.name in counts and v.status == "error"]
        if names:
            rejected[name] = names
            p.explained.update(names)
    if not rejected:
        return []
    n = next(len(flatten_inputs(v.args, v.kwargs)[0]) for v in variants if v.kind == EXAMPLE)
    labels = " and ".join(_LABELS[p] for p in rejected)
    tried = sorted({x for names in rejected.values() for x in names})
    return [_finding(PATH_DIFFERS, f"{labels} {'take' if len(rejected) > 1 else 'takes'} only the example's "
                     f"number of images: the length of a list input is part of the input structure the artifact "
                     f"is built for, and {', '.join(tried)} raise{'s' * (len(tried) == 1)} where eager accepts them",
                     severity=Severity.WARNING, subject="images",
                     fix="batch the images into one padded [N, 3, H, W] tensor with a dynamic N, or build one "
                         f"artifact per number of images you serve (this one takes {n} input tensors)")]


def _deprecation_findings(paths: dict[str, PathResult]) -> list[Finding]:
    import torch

    texts = []
    for name in ("trace", "script"):
        p = paths.get(name)
        if p is None:
            continue
        for w in p.warnings:
            if issubclass(w.category, DeprecationWarning) and "is deprecated" in w.message and f"torch.jit.{name}" in w.message:
                texts.append(w.message)
                break
    if not texts:
        return []
    used = " and ".join(n for n in ("torch.jit.trace", "torch.jit.script") if any(f"`{n}`" in t for t in texts))
    return [_finding(JIT_DEPRECATED, f"{used} {'are' if ' and ' in used else 'is'} deprecated on torch {torch.__version__}: "
                     f"'{texts[0]}'",
                     fix="ship with torch.export.export or the default torch.onnx.export")]


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
    import torch

    start = time.perf_counter()
    note = progress or (lambda s: None)
    model = target.model
    example = Variant(EXAMPLE, EXAMPLE, tuple(target.args), dict(target.kwargs))
    findings: list[Finding] = []
    path, line = _model_location(model)
    # the training-mode finding points at FUNC, which hands the model over
    mode = _training_mode(model, example, *((target.path, target.line) if target.line else (path, line)))
    if mode is not None:
        findings.append(mode)
    dims, _, eager = eager_inputs(model, target.args, target.kwargs)
    example = eager.valid[0]
    note("eager latency")
    eager_ms = T.eager_latency(model, eager.valid, dims, C.model_device(model), budget_s)

    def latency(run: Callable[[Variant], Any]) -> dict[str, Any]:
        with T.eval_mode(model):
            return _latency(run, lambda: model(*example.args, **example.kwargs), example, eager_ms["example"],
                            budget_s / 2)

    builders: dict[str, Callable[[PathResult], Callable[[Variant], Any]]] = {
        "trace": lambda r: _build_trace(model, example, r),
        "script": lambda r: _build_script(model, example, r),
        "export": lambda r: _build_export(model, example, dims, r, strict=False),
        "onnx": lambda r: _build_onnx(model, example, dims, r),
    }
    results: dict[str, PathResult] = {}
    for name in PATHS:
        if name not in paths:
            results[name] = PathResult(name, SKIPPED, "not requested")
            continue
        if name == "onnx" and onnx_missing():
            results[name] = PathResult(name, SKIPPED, f"{', '.join(onnx_missing())} not installed: {ONNX_HINT}")
            continue
        note(name)
        results[name] = _run_path(name, builders[name], eager, example, latency)
        if name == "export" and strict_too:
            note("export (strict)")
            strict = _run_path("export", lambda r: _build_export(model, example, dims, r, strict=True),
                               eager, example, None)
            results[name].detail["strict"] = {"status": strict.status, "reason": strict.reason,
                                              "max_abs_err": C.rounded(strict.max_abs_err),
                                              "seconds": round(strict.seconds, 3)}
            results[name].detail["mode"] = "non-strict"

    findings += _structure_findings(results, eager.valid)
    output_findings = _output_type_findings(eager, results)
    covered = {n for n, p in results.items() if p.status == FAILED and any(
        f.code == OUTPUT_TYPE.code and f.severity != Severity.INFO for f in output_findings)
        and re.search(_CARRY, _error_text(p.error))}
    findings += output_findings
    if "trace" in results:
        tf = _trace_findings(results["trace"], (path, line))
        findings += tf
        if tf:
            covered.add("trace")
    if "export" in results:
        rnn = any(isinstance(m, torch.nn.RNNBase) for m in model.modules())
        ef = _export_findings(results["export"], results.get("onnx"), rnn)
        findings += ef
        if ef:
            covered.add("export")
            if results.get("onnx") and results["onnx"].status == MISMATCH:
                covered.add("onnx")
    findings += _failure_findings(results, covered)
    findings += _mismatch_findings(results, covered)
    findings += _deprecation_findings(results)
    return ExportReport(findings=findings, paths=results, variants=eager.valid, dims=dims,
                        seconds=time.perf_counter() - start, invalid_variants=eager.invalid,
                        eager_latency_ms=eager_ms)
