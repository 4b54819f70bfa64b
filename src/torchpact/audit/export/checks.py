"""The export-check codes (TP70x, TP75x): what each finds, why it matters on torch 2.13, how to fix it."""

from __future__ import annotations

from torchpact.checks import Check
from torchpact.findings import Category, Severity

_RUNTIME = "\n\n(Found by `torchpact export-check`, which builds the artifact and runs it on varied inputs.)"

TRACE_BRANCH = Check(
    code="TP701", category=Category.EXPORT, severity=Severity.ERROR,
    severity_note="`warning` when trace or export raises on a data-dependent branch (it fails loudly instead of baking "
                  "the branch in)",
    summary="The traced model gives other results than eager on other inputs: trace baked in a branch or number taken "
            "from tensor values.",
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
    severity_note="`info` when torch emitted a `TracerWarning` at a line but no input torchpact ran showed the trace "
                  "wrong",
    summary="The traced model breaks on another batch size, sequence length or image size: trace specialised a shape.",
    doc="""## What it does
Runs the traced model on other batch sizes, sequence or time lengths and image heights/widths (the
example's values repeated: sizes 1 and 2, half the example, past twice and past four times it, and
the smallest size eager accepts, found by halving and bisecting) and compares with eager. Every line
torch emitted a `TracerWarning` at while tracing is a finding. When that line compares a size with
a number (`if seq_len > self.max_cached:`), torchpact reads both sides in the model's frame while
tracing and also runs the trace on the sizes on both sides of the comparison (40 and 41 here), so a
trace that is wrong only past a threshold is caught. The finding is an error with the input that
shows the trace wrong, `info` when no input did (it names the sizes tried, or says the condition
could not be read).

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
(each kept only where eager accepts other sizes; the axes named by the modules that take them, e.g.
dim 0 is time for an `nn.GRU` with `batch_first=False`) and reads the exported program's input
shapes: a dimension that came out as a number was specialised. It also reads the guards the
exporter's shape environment collected, not only `range_constraints` (which shows `[2, int_oo]`
for a width that four stride-2 convolutions forbid below 17): where the guards flip from refusing to
accepting a size, the program runs on both sides, and a size it refuses where eager returns is
reported with the guard and the model line that added it. A guard `Ne(e, 1)` is torch.export's 0/1
specialisation (pytorch/pytorch#146046, #157621): the finding says so, and torchpact tries exporting
under `backed_size_oblivious=True` and says whether that program takes the refused sizes.

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
    severity_note="`info` when the output is a dict, which torch.jit.trace refuses by default: torchpact traced with "
                  "strict=False",
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
    severity_note="`info` when the failed path is torch.jit.trace or torch.jit.script (deprecated), `warning` for "
                  "torch.export and ONNX",
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
