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
    summary="The script raised an exception, or its process died; torchpact explains the causes it recognises.",
    doc="""## What it does
Reports that the watched script ended with an exception, where it was raised in the user's code,
and — for errors torch raises for a known cause — what that cause is and how to fix it.
Also reports a script whose process ended without Python seeing it: killed by a signal (SIGKILL is
what the kernel's OOM killer sends), a crash in native code (a segmentation fault), or `os._exit()`.
`torchpact run` keeps each finding as it is found, outside the script's process, so the report
still holds what was seen until then, and says how and at which step the process ended.

## Why is this bad?
torch's messages name the symptom (a version counter, a leaf, a reduction) rather than the line of
the user's code that caused it. A process killed outright prints nothing at all (a shell shows
"Killed"). The report is still written, and the script's exit code is kept (128 + N for a process
killed by signal N, as a shell shows it: 137 for SIGKILL, 139 for a segmentation fault).

## How to fix
Follow the explanation; run `torchpact lint` on the script for the static pattern behind it.""",
    severity_note="`info` when the process ended with `os._exit(0)` (nothing failed, but the run's last checks "
                  "did not run)",
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
        r"Timed out waiting \d+ms for (recv|send)|Socket Timeout|collective operation timeout"
        r"|Watchdog caught collective operation timeout",
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


# What a process killed by each signal most often means; the others are named only.
SIGNAL_CAUSES = {
    9: ("the kernel's OOM killer sends SIGKILL when the machine, or the job's memory limit (cgroup, container, "
        "Slurm), runs out of memory; so does `kill -9`",
        "look for 'Out of memory: Killed process' in `dmesg` or `journalctl -k`; if memory ran out, keep less alive "
        "(see TP101 if it is reported), use a smaller batch or fewer DataLoader workers"),
    11: ("a segmentation fault: code in a native library (a C++/CUDA extension, a driver, torch itself) read or "
         "wrote memory it must not, and Python never saw it",
         "run the script with `python -X faulthandler` (or PYTHONFAULTHANDLER=1) to print the Python stack at the "
         "crash, and update or rebuild the extension it points at"),
    7: ("a bus error in native code (often a memory-mapped file truncated while in use, or /dev/shm full for "
        "DataLoader workers)",
        "run with `python -X faulthandler` to see where; give /dev/shm more room (docker --shm-size)"),
    6: ("an abort in native code (a failed C++ assertion or an uncaught C++ exception, whose message is printed "
        "just above)",
        "read the C++ message printed before the abort; `python -X faulthandler` shows the Python stack"),
}


@dataclass(frozen=True)
class ProcessEnd:
    ended: str       # how, in a few words: "killed by signal 9 (SIGKILL) at step 12"
    message: str
    fix: str
    severity: Severity


def process_end(code: int, steps: int, after_script: bool = False) -> ProcessEnd:
    """How a process that ended without Python's shutdown ended, from its exit code as a shell shows it
    (128 + N for signal N) and the optimizer steps it had done."""
    import signal

    where = ("after the script had ended (in the interpreter's shutdown)" if after_script
             else f"after {steps} optimizer step{'s' * (steps != 1)}")
    if code > 128:
        number = code - 128
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        ended = f"killed by signal {number} ({name}) {where}"
        cause, fix = SIGNAL_CAUSES.get(number, (None, "see what sent the signal (the scheduler's log, `dmesg`)"))
        message = f"the script's process was {ended}" + (f": {cause}" if cause else "")
        severity = Severity.ERROR
    else:
        ended = f"exited with code {code} {where} without Python's shutdown"
        message = (f"the script's process {ended} (`os._exit({code})`, or an exit from native code): no `finally` "
                   "block, atexit handler or end-of-run check ran")
        fix = ("end the script by returning or with `sys.exit()`, so that it shuts down normally" if code == 0 else
               "see what called os._exit (or exit in native code), and why")
        severity = Severity.INFO if code == 0 else Severity.ERROR
    if not after_script:
        message += "; the report holds what was seen until then"
    return ProcessEnd(ended=ended, message=message, fix=fix, severity=severity)
