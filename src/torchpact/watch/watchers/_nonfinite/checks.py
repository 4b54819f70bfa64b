"""The two checks of the nonfinite watcher: their codes and user documentation."""

from __future__ import annotations

from torchpact.findings import Category, Severity
from torchpact.watch.watcher import Check

FORWARD = Check(
    code="TP351",
    category=Category.NUMERICS,
    severity=Severity.ERROR,
    summary="A module's output turned NaN/inf although its inputs were finite.",
    doc="""## What it does
On sampled steps (every step at first, the steps another check asks for, and every step after an
inf/NaN gradient was seen; on the periodic every-Nth steps after those, evaluations under no_grad
only, as TP352 checks a training step's gradients on every step), notes every floating tensor
entering or leaving a module. When the model's output holds NaN or +inf (one sum, read when the
outermost module call returns), it reduces the tensors it noted and
names the first module, in execution order, whose output holds NaN or +inf while none of its inputs
did. A tensor overwritten in place after a module returned it (`out += identity`) no longer shows
what that module produced; the enclosing module is named then, with the op. That module alone is
then run again on a private copy of its inputs, under a `TorchDispatchMode` that names the first
aten op whose output turns NaN/inf, with its source line. The re-run never changes training: it uses
detached parameters and cloned buffers and inputs, bypasses every hook, and saves and restores the
RNG state. The finding gives the module's qualified name, the step, the line that called the model,
and the op when found. -inf alone is not reported (attention masks and log-probabilities use it), but
an op that turns -inf into NaN (e.g. a softmax over a fully masked row) is.

On the other steps, a forward NaN/inf that reaches the gradients is found by TP352's check of every
step; on CPU that step is then replayed before the update (see TP352), and the module and op are named
from the replay, with the words "step N was not recorded: this was seen in its replay".

When the model's own input already holds NaN/inf, that is reported instead (the data or the code
before the model produced it). When the culprit module's parameters are already NaN because an
earlier update applied non-finite gradients, only that earlier step is reported (TP352).

## Why is this bad?
One NaN reaches the loss, the gradients and, after `optimizer.step()`, every parameter: the run is
lost, and torch 2.13 raises nothing. By the time the loss prints `nan` the origin is gone: every
module downstream of the first one outputs NaN too. Typical causes are `log` / `sqrt` of 0 or of a
negative value, `0 / 0` in a normalisation of an all-zero row, `exp` overflow, a float16 matmul
overflowing 65504, and a softmax over a row where every position is masked with -inf.

## How to fix
Fix the op named: clamp the argument of `log` / `sqrt` (`x.clamp_min(eps)`), add an `eps` to
denominators, use `log_softmax` / `logsumexp` / `F.logsigmoid` instead of `log(softmax(...))`,
keep at least one unmasked position per row (or mask with `torch.finfo(dtype).min`), and run ops
that overflow float16 in float32 or bfloat16.""",
)

BACKWARD = Check(
    code="TP352",
    category=Category.NUMERICS,
    severity=Severity.ERROR,
    summary="A module's backward turned a finite gradient into NaN/inf.",
    doc="""## What it does
Every step, one `torch._foreach_norm` over the gradients in the optimizer's step pre-hook says
whether any gradient about to be applied is NaN/inf (on CPU, when the script's `clip_grad_norm_` has
just computed the total norm of exactly these gradients, that norm is read instead). On the steps
where TP351 notes a training forward's tensors, tensor hooks on the tensors entering and leaving
modules (not module backward hooks, which would change the graph) keep each activation gradient (up
to 64 MB in all, then reduce it without a host sync); when the applied
gradients are non-finite, those gradients are reduced and read, and, in backward order, the first
tensor whose gradient is NaN/inf names the module whose backward produced it: the gradient of its
output was finite, the gradient of its input is not.
When no activation gradient is bad, the parameters with bad gradients are named instead. For a module
defined in the user's code, the calls in its `forward` whose derivative is infinite at a boundary
(sqrt at 0, `** 0.5` at 0, log at 0, acos/asin at ±1) are named as the likely cause. A step whose
forward already produced NaN/inf is reported as TP351, not here. Steps where `GradScaler` skips the
update (its scaled gradients are expected to overflow) are not reported.

On the steps that are not recorded, each outermost model call keeps references to its inputs, the
CPU generator's state and the gradient its outputs receive. When that step's gradients are non-finite
(on CPU, where the check is read before `optimizer.step()`), its model calls are replayed on private
copies of the modules (same inputs, parameters and RNG state; the script's parameters, `.grad`,
BatchNorm statistics and RNG are left exactly as they were) with the recording above, so the module
(and op) is named as on a recorded step. The finding says how faithful the replay was: its outputs and
gradients equal the step's bit for bit, or differ. A replay that cannot be faithful (an input modified
in place after the call, a sharded or TorchScript model, a model on another device, a script whose steps
make more than 16 model calls, such as an RL rollout calling its policy at every time step, where
keeping them would slow training) or whose outputs differ from the step's (a forward that reads a counter or another
generator, non-deterministic kernels) names no module: the finding says why. Nor does a replay whose
gradient is already NaN/inf where it enters the model's output when that output could not be compared
with the step's (changed in place after the call): the gradient is the step's, the forward the replay's.
Module hooks are not run in the replay (the finding names the modules that have some); under
`DistributedDataParallel` only this rank's calls are replayed. On CUDA the check is read after the update
without a sync, so no replay is made; the fix names the `--sample-first` rerun that records that step.

## Why is this bad?
The forward is finite, so the loss looks fine, but the update writes NaN into the parameters and
the next forward is NaN everywhere. `torch.autograd.set_detect_anomaly(True)` does not find this
reliably: it checks each backward function's output for NaN only, so when a backward produces
inf (sqrt at 0 gives an infinite derivative) it blames the later op where inf meets a 0 and becomes
NaN, often in another module; and it records a traceback for every op, so it is too slow to leave on.

## How to fix
Make the derivative finite where the forward is: `torch.sqrt(x + eps)` or `x.clamp_min(eps).sqrt()`
instead of `torch.sqrt(x)` at 0, `torch.linalg.vector_norm` instead of `sqrt(sum(x**2))`, clamp
`acos`/`asin` arguments to `[-1 + eps, 1 - eps]`, and avoid `torch.where(cond, f(x), 0)` with an `f`
whose gradient is infinite on the masked side (mask `x` before `f`). Gradient clipping does not help
(the norm of a NaN gradient is NaN).""",
)
