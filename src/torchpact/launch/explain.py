"""torch's own errors, explained in plain words when torchpact knows the cause."""

from __future__ import annotations

import re
from dataclasses import dataclass

from torchpact.findings import Category, Severity
from torchpact.watch.watcher import Check

SCRIPT_ERROR = Check(
    code="TP003",
    category=Category.TRAINING,
    severity=Severity.ERROR,
    summary="The script raised an exception; torchpact explains torch's errors it recognises.",
    doc="""## What it does
Reports that the watched script ended with an exception, where it was raised in the user's code,
and — for errors torch raises for a known cause — what that cause is and how to fix it.

## Why is this bad?
torch's messages name the symptom (a version counter, a leaf, a reduction) rather than the line of
the user's code that caused it. The report is still written, and the script's exit code is kept.

## How to fix
Follow the explanation; run `torchpact lint` on the script for the static pattern behind it.""",
)


@dataclass(frozen=True)
class Explanation:
    pattern: str
    cause: str
    fix: str
    related: str | None = None  # the lint rule of the same pattern


EXPLANATIONS = [
    Explanation(
        r"a leaf Variable that requires grad is being used in an in-place operation",
        "an in-place update (`w -= ...`, `w.sub_(...)`, `w[i] = ...`) of a parameter or other leaf tensor "
        "that requires grad, while gradients are being recorded",
        "do manual updates under `with torch.no_grad():` (or use an optimizer)", "TP202"),
    Explanation(
        r"one of the variables needed for gradient computation has been modified by an inplace operation",
        "a tensor that autograd saved for backward was modified in place after the forward used it",
        "replace the in-place op (`x += ...`, `relu_`, `x[...] = ...`) by its out-of-place form, or clone "
        "the tensor before modifying it; `torch.autograd.set_detect_anomaly(True)` names the forward op"),
    Explanation(
        r"Trying to backward through the graph a second time",
        "backward ran twice through the same graph: the first call freed its saved tensors (often a "
        "tensor carried over from the previous iteration, such as a hidden state or a running loss)",
        "`.detach()` what you carry across iterations; use `retain_graph=True` only if you really need "
        "two backward passes"),
    Explanation(
        r"element 0 of tensors does not require grad and does not have a grad_fn",
        "backward() on a tensor with no graph: computed under `no_grad`/`inference_mode`, detached, or "
        "from parameters that all have requires_grad=False",
        "compute the loss with gradients enabled, and check which parameters are frozen", "TP206"),
    Explanation(
        r"Can't call numpy\(\) on Tensor that requires grad",
        "`.numpy()` on a tensor attached to the autograd graph",
        "use `.detach().cpu().numpy()`", "TP205"),
    Explanation(
        r"Expected to have finished reduction in the prior iteration",
        "DistributedDataParallel: some parameters received no gradient in the previous iteration "
        "(an unused branch or submodule), so its gradient reduction never finished",
        "make every parameter take part in the loss, or pass find_unused_parameters=True (or "
        "static_graph=True when the unused set never changes)", "TP604"),
    Explanation(
        r"Connection closed by peer|Connection reset by peer|Broken pipe.*gloo|NCCL.*(remote|peer)",
        "another rank of the job died, so this rank's collective lost its peer: this error is a "
        "consequence, not the cause",
        "look at the rank that failed first (TP004) and its own error"),
    Explanation(
        r"Timed out waiting \d+ms for (recv|send)|Socket Timeout|collective operation timeout|Watchdog caught collective operation timeout",
        "a collective timed out: this rank waited for peers that never joined it — a rank that stopped "
        "early (different numbers of batches per rank) or is stuck elsewhere",
        "give every rank the same number of steps (DistributedSampler with drop_last, or the Join context "
        "manager); torchpact's TP653/TP655 findings name where each rank was"),
    Explanation(
        r"mat1 and mat2 shapes cannot be multiplied|size mismatch|shape .* is invalid for input of size",
        "a shape mismatch between a layer and its input",
        "check the layer's in_features against the flattened input size (print `x.shape` before the layer)"),
    Explanation(
        r"Expected all tensors to be on the same device",
        "tensors on different devices met in one op (often the batch was not moved, or a module was "
        "created after `.to(device)`)",
        "move the batch with `.to(device)` and create submodules before moving the model"),
    Explanation(
        r"CUDA out of memory|OutOfMemoryError",
        "the GPU ran out of memory",
        "reduce the batch size, free references to old graphs (`.item()`/`.detach()` what you log), or "
        "use activation checkpointing; `torch.cuda.memory_summary()` shows who holds memory"),
    Explanation(
        r"sampler option is mutually exclusive with shuffle",
        "DataLoader got both `shuffle=True` and a `sampler`",
        "drop `shuffle=True` (shuffle in the sampler, e.g. DistributedSampler(shuffle=True))", "TP502"),
]


def explain(exc: BaseException) -> Explanation | None:
    text = f"{type(exc).__name__}: {exc}"
    for e in EXPLANATIONS:
        if re.search(e.pattern, text):
            return e
    return None
