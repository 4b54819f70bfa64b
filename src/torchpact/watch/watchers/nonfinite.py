"""Where NaN / inf first appears: the module whose output (forward) or input gradient (backward) turns non-finite.

Forward (TP351). On recorded steps, every floating tensor that enters or leaves a module is noted with
its version. When the outermost module call returns, the model's output is reduced to its sum (NaN
when a NaN is present, +inf or -inf when only that infinity is). "Bad" means NaN or +inf: -inf alone
is how masks are written (``masked_fill(mask, -inf)``) and log-probabilities of impossible events, so
it is tracked but never reported by itself. Only when the model's output is bad (a NaN that a later
module masks on purpose, e.g. imputed missing values, is fine) are the other tensors reduced, read
with one ``tolist()`` per device and dtype, and a culprit looked for: the first module, in completion
order, with a bad output and no bad input. That one module is then run again on a private copy
(detached parameters, cloned buffers and inputs, no hooks, RNG state saved and restored, the autocast
state of the original call) under a ``TorchDispatchMode`` that names the first aten op whose output
turns bad, with its source line.

With grad enabled the tensors are held until the outermost call returns (autograd keeps most of them
alive anyway, and the re-run needs the inputs), so their reduction waits for a bad output and most
forwards never pay it. A tensor changed in place since it was seen (``out += identity``) is then
unknown and makes no module the culprit, which falls to the enclosing module; the inputs of a module
that overwrites them (``nn.ReLU(inplace=True)`` and the other ``inplace`` modules) are reduced before
it runs. Under no_grad each tensor is reduced when seen (one kernel, no host sync) and only a weak
reference is kept, so no op is searched for.

Backward (TP352). On the same recorded steps, a tensor hook (never a module backward hook, which would
change the graph) is put on every non-leaf tensor that enters or leaves a module; the hook keeps the
gradient (up to ``HOLD_BYTES`` in all; past that, each is reduced to its sum). Every step, in the
optimizer's step pre-hook, one ``_foreach_norm`` over the gradients about to be applied says whether
any is non-finite. Only then are the kept gradients reduced and read; in firing order (backward
order), the first tensor whose gradient is non-finite is the input of the module whose backward
produced it: every gradient downstream of it fired earlier and was finite.
Unlike ``torch.autograd.detect_anomaly`` (which checks backward outputs for NaN only, so a backward
that produces inf is blamed on whichever later op turns inf into NaN), inf counts.

Recorded steps are the sampled ones, the steps after a non-finite gradient, and, on the sampler's
periodic every-Nth steps past its first ones (``Session.periodic``), forwards without grad
(evaluations) only. A training forward's NaN reaches the gradients, which are checked on every step:
on a periodic step it is detected there, arms the steps after it and, when it does not recur, is
reported with the rerun that locates it. Recording a training step costs a small GPT up to 3.5 ms, a third
of all the checks of its sampled steps.

Trade-offs. Module granularity costs a tensor hook per activation on recorded steps, and a reduction
per activation gradient past ``HOLD_BYTES`` (and per tensor of a no-grad forward); an op-level view
would cost one per autograd node. The backward op is not re-run (that would need every module's
inputs and output gradients held through the backward); instead, for modules defined in the user's
code, the calls in ``forward`` whose derivative is infinite at a boundary (sqrt at 0, acos at 1, ...)
are named. A gradient is attributed to the module that consumes the tensor, which is exact unless the
parent also uses that tensor directly (then both are named). On the other steps only the per-step
gradient check runs (on CUDA read one step late, without a sync; on CPU, when the script's own
``clip_grad_norm_`` has just computed the total norm of these very gradients, that number is read
instead); if it finds inf/NaN, every
following step is checked for ``ARMED_STEPS`` steps, and the step is reported without a module
unless a later step locates the cause.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import itertools
import math
import os
import sys
import textwrap
import weakref
from typing import Any, NamedTuple

from torchpact.findings import Category, Severity
from torchpact.watch.frames import is_user_file
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers._batched import grad_norms, surely_finite
from torchpact.watch.watchers._local import dense_grads
from torchpact.watch.watchers._patch import Patch, parameter_list, remove_all

ARMED_STEPS = 20          # steps checked in full after a non-finite gradient on an unsampled step
MAX_ENTRIES = 20_000      # tensors tracked per outermost forward / per step in backward
MAX_RERUNS = 3            # op searches per run (each costs a forward of one module with a sync per op)
MAX_RERUN_BYTES = 1 << 30
MAX_REPORTS = 5           # per check: after that the run is beyond repair and more findings are noise
# Activation gradients held unreduced between two optimizer steps; past it, reduced. On CPU each reduction
# is synchronous work on the training thread (~0.1 ms per MB: 4 ms of a small GPT's sampled step at 16 MB);
# 64 MB held until the next forward is small next to the activations that backward just released.
HOLD_BYTES = 64 << 20

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

# Derivative infinite (or NaN) at a boundary of the domain although the value there is finite.
_RISKY_CALLS = {
    "sqrt": "its derivative is infinite at 0",
    "pow": "a fractional power has an infinite derivative at 0",
    "acos": "its derivative is infinite at ±1",
    "asin": "its derivative is infinite at ±1",
    "arccos": "its derivative is infinite at ±1",
    "arcsin": "its derivative is infinite at ±1",
    "atanh": "its derivative is infinite at ±1",
    "log": "its derivative is infinite at 0",
    "log2": "its derivative is infinite at 0",
    "log10": "its derivative is infinite at 0",
    "rsqrt": "it is infinite at 0",
    "cbrt": "its derivative is infinite at 0",
}

_OP_HINTS = {
    "log": "log of 0 gives -inf and of a negative value NaN: clamp the argument (`x.clamp_min(eps)`) or "
           "use a log-space function (`log_softmax`, `logsumexp`, `F.logsigmoid`)",
    "sqrt": "sqrt of a negative value is NaN: clamp the argument (`x.clamp_min(0)`, or `+ eps`)",
    "rsqrt": "rsqrt of 0 is inf and of a negative value NaN: add an `eps` to the argument",
    "div": "0/0 is NaN and x/0 is inf: add an `eps` to the denominator, or mask empty rows",
    "exp": "exp overflows above 88 (float32) or 11 (float16): subtract the max first, or use "
           "`softmax` / `logsumexp`",
    "pow": "a power overflows or takes a fractional power of a negative value: clamp the base",
    "softmax": "a softmax over a row where every position is -inf gives NaN: keep one unmasked position "
               "per row, or mask with `torch.finfo(dtype).min` instead of -inf",
    "sub": "inf - inf is NaN: the operands already overflowed",
    "mul": "0 * inf is NaN: one operand already overflowed",
}
_MATMUL_OPS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "convolution", "conv2d", "conv1d",
               "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
               "_scaled_dot_product_flash_attention", "_scaled_dot_product_cudnn_attention"}

# ---------------------------------------------------------------------------------------------- data
class _Entry:
    """One tensor seen entering or leaving a module during a recorded forward.

    With grad enabled the tensor is held until the outermost call returns (autograd keeps most of them
    alive anyway, and the op search needs them) and is only reduced then, if the model's output is bad;
    under no_grad only a weak reference is kept and the tensor is reduced at once, so an inference
    forward frees its activations as it goes.
    """

    __slots__ = ("bw", "reduced", "ref", "settled", "strong", "total", "version")

    def __init__(self, tensor: Any, version: int, reduced: Any, strong: bool) -> None:
        self.strong = strong
        self.ref = tensor if strong else weakref.ref(tensor)
        self.version = version
        self.reduced = reduced          # 0-d sum taken when seen; None while deferred (see _settle)
        self.total: float | None = None  # NaN when NaN (or +inf and -inf) is present, +-inf when one is; None: unknown
        self.settled = False
        self.bw = -1                    # index in the backward table, -1 when not hooked

    @property
    def tensor(self) -> Any:
        return self.ref if self.strong else self.ref()

    @property
    def bad(self) -> bool:
        total = self.total
        return total is not None and (math.isnan(total) or total == math.inf)

    @property
    def nan(self) -> bool:
        return self.total is not None and math.isnan(self.total)

    @property
    def neginf(self) -> bool:
        return self.total == -math.inf


def _reduce_now(entries: list[_Entry]) -> None:
    """Reduce the held tensors not reduced yet that are still at the version seen (before an in-place
    module overwrites them, or when the model's output is bad); a changed one stays unreduced."""
    for e in entries:
        if e.reduced is None and not e.settled:
            t = e.tensor
            if t is not None and _version(t) == e.version:
                e.reduced = _reduce(t)


def _settle(entries: list[_Entry]) -> None:
    """Give each entry its total: the sum taken when it was seen, or, for a held tensor, its sum now if it
    is still at the version seen. A tensor changed in place since then stays unknown (``total`` None)."""
    fresh = [e for e in entries if not e.settled]
    _reduce_now(fresh)
    for e in fresh:
        e.settled = True
    known = [e for e in fresh if e.reduced is not None]
    for e, v in zip(known, _read([e.reduced for e in known]) if known else ()):
        e.total = v


class _Call:
    """One module call during a recorded forward (``ins`` / ``outs``: indices of its tensors' entries)."""

    __slots__ = ("args", "autocast", "ins", "module", "outs", "parent", "root")

    def __init__(self, module: Any, parent: _Call | None, args: tuple | None,
                 autocast: tuple[str, bool, Any] | None) -> None:
        self.module = module
        self.parent = parent
        self.root = parent.root if parent is not None else module
        self.args = args
        self.autocast = autocast
        self.ins: list[int] | tuple = ()
        self.outs: list[int] | tuple = ()


class _BwCall:
    """What the backward analysis needs of a module call, without holding any tensor."""

    __slots__ = ("module", "outs", "parent", "root")

    def __init__(self, module: weakref.ref, parent: _BwCall | None, root: weakref.ref, outs: list[int]) -> None:
        self.module = module
        self.parent = parent
        self.root = root
        self.outs = outs

    def is_ancestor_of(self, other: _BwCall) -> bool:
        p = other.parent
        while p is not None:
            if p is self:
                return True
            p = p.parent
        return False


class _BwTable:
    """The tensors hooked between two optimizer steps, and the reductions of their gradients as they fire.

    ``calls`` holds, per module call, (module, index of the parent call, root, hooked inputs, hooked
    outputs): plain tuples, turned into linked ``_BwCall`` objects only when a step needs analysing.
    """

    __slots__ = ("calls", "fired", "open", "reduced", "size")

    def __init__(self, open: bool = True) -> None:
        self.size = 0
        self.calls: list[tuple[Any, int | None, Any, list[int], list[int]]] = []
        # (firing order, tensor index, gradient): the gradient itself (``fired[reduced:]``) or its 0-d sum
        self.fired: list[tuple[int, int, Any]] = []
        self.reduced = 0
        self.open = open

    def forget_fired(self) -> None:
        self.fired, self.reduced = [], 0

    def reduce_held(self) -> None:
        fired = self.fired
        for k in range(self.reduced, len(fired)):
            order, index, grad = fired[k]
            fired[k] = (order, index, _reduce(grad))
        self.reduced = len(fired)

    def call(self, index: int, cache: dict[int, _BwCall]) -> _BwCall:
        got = cache.get(index)
        if got is None:
            module, parent, root, _, outs = self.calls[index]
            got = _BwCall(module=weakref.ref(module), parent=None if parent is None else self.call(parent, cache),
                          root=weakref.ref(root), outs=outs)
            cache[index] = got
        return got


class _GradHook:
    """The tensor hook of a recorded activation: keeps its gradient in the backward table as it fires.

    The gradient is held, not reduced: it is read only if the step's gradients turn out non-finite.
    Holding it also keeps autograd from accumulating into it in place. (An object, not a closure: one
    allocation per hooked tensor instead of six.)"""

    __slots__ = ("index", "table", "watcher")

    def __init__(self, watcher: NonFinite, table: _BwTable, index: int) -> None:
        self.watcher = watcher
        self.table = table
        self.index = index

    def __call__(self, grad: Any) -> None:
        if grad.requires_grad:  # a double backward's: do not keep its graph
            grad = grad.detach()
        watcher = self.watcher
        self.table.fired.append((next(watcher._fire_order), self.index, grad))
        watcher._held += grad.numel() * grad.element_size()
        if watcher._held > HOLD_BYTES:
            watcher._reduce_held()


class _OpHit(NamedTuple):
    """The first aten op of a re-run whose output turned bad."""

    op: str
    dtype: str
    path: str | None
    line: int | None
    neginf_input: bool
    neginf_origin: tuple[str, str | None, int | None] | None  # op, path, line that made the -inf


class _FoundIt(Exception):
    pass


# ------------------------------------------------------------------------------------------ helpers
_torch: Any = None  # torch, bound when the watcher attaches: the recording hooks use it on every module call

# A module call made with autocast off on every device: its re-run turns autocast off on the device of
# its inputs (the state around the re-run is the outermost call's, which may have it on).
AUTOCAST_OFF = ("", False, None)


def _autocast_at_call(t: Any) -> tuple[str, bool, Any] | None:
    """(device type, enabled, dtype) of autocast for ``t``'s device now: ``AUTOCAST_OFF`` when it is off on every
    device, None for a device without autocast."""
    torch = _torch
    if not torch._C._is_any_autocast_enabled():
        return AUTOCAST_OFF
    device = t.device.type
    try:
        enabled = torch.is_autocast_enabled(device)
        return (device, enabled, torch.get_autocast_dtype(device) if enabled else None)
    except (RuntimeError, TypeError):  # a device type without autocast
        return None


def _tensors(value: Any, depth: int = 0) -> list[Any]:
    """Floating tensors in a module's args or output (tensor, sequence, dict, ModelOutput)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if depth > 2:
        return []
    out: list[Any] = []
    if isinstance(value, (tuple, list)):
        for v in value[:32]:
            out.extend(_tensors(v, depth + 1))
    elif isinstance(value, dict):
        for v in list(value.values())[:32]:
            out.extend(_tensors(v, depth + 1))
    return out


def _read(tensors: list[Any]) -> list[float]:
    """Values of 0-d/1-d tensors as floats: one stack and one ``tolist()`` per (device, dtype)."""
    import torch

    out: list[float] = [0.0] * len(tensors)
    groups: dict[tuple, list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.device, t.dtype), []).append(i)
    for idx in groups.values():
        values = torch.stack([tensors[i] for i in idx]).tolist()
        for i, v in zip(idx, values):
            out[i] = v
    return out


def _reduce(t: Any) -> Any:
    """A 0-d sum of ``t`` (float32 accumulation), with no host sync; None when ``t`` cannot be reduced.

    The sum is 5x cheaper than ``aminmax`` on CPU and still tells the cases apart: NaN when a NaN (or
    both infinities) is present, +inf or -inf when only that one is. A finite tensor whose sum
    overflows float32 (values near 1e34) reads as +inf; a finding is only made after a precise check.
    """
    import torch

    if not _reducible(t):
        return None
    t = t.detach()
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.sum(dtype=torch.float32)
    return t.sum()


def _reducible(t: Any) -> bool:
    if t.numel() == 0 or t.is_sparse or t.is_meta or t.is_complex():
        return False
    return not _is_wrapped(t)  # under vmap / grad transforms: no data to read


_functorch_wrapped: Any = None


def _is_wrapped(t: Any) -> bool:
    global _functorch_wrapped
    if _functorch_wrapped is None:
        import torch

        functorch = getattr(torch._C, "_functorch", None)
        _functorch_wrapped = getattr(functorch, "is_functorch_wrapped_tensor", None) or (lambda _: False)
    return _functorch_wrapped(t)


def _is_bad(x: Any) -> bool:
    import torch

    return bool((torch.isnan(x) | torch.isposinf(x)).any())


def _has_neginf(x: Any) -> bool:
    import torch

    return bool(torch.isneginf(x).any())


def _pretty_op(name: str) -> str:
    base = name.split(".")[1] if name.startswith("aten.") else name.split(".")[0]
    base = base.rstrip("_")
    if base.startswith("_") and "softmax" in base:
        return "softmax"
    return base


def _user_frame(stop: Any) -> tuple[str | None, int | None]:
    """The innermost user frame, searching no further up than ``stop`` (the re-run's own frame)."""
    frame = sys._getframe(2)
    while frame is not None and frame is not stop:
        if is_user_file(frame.f_code.co_filename):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None, None


def _private_copy(module: Any, memo: dict[int, Any]) -> Any:
    """A copy of ``module`` sharing nothing writable with it, whose calls bypass every hook."""
    if id(module) in memo:
        return memo[id(module)]
    if "forward" in vars(module):
        raise _FoundIt("forward replaced on the instance")  # bound to the original: not re-runnable
    new = type(module).__new__(type(module))
    new.__dict__.update(vars(module))
    memo[id(module)] = new
    new._parameters = {k: (None if p is None else p.detach()) for k, p in module._parameters.items()}
    new._buffers = {k: (None if b is None else b.detach().clone()) for k, b in module._buffers.items()}
    new._modules = {k: (None if m is None else _private_copy(m, memo)) for k, m in module._modules.items()}
    # Module.__call__ goes straight to _compiled_call_impl when set: no global or module hook runs.
    new.__dict__["_compiled_call_impl"] = new.forward
    return new


def _module_bytes(module: Any) -> int:
    total = 0
    for t in list(module.parameters()) + list(module.buffers()):
        total += t.numel() * t.element_size()
    return total


def _risky_calls(module: Any) -> list[tuple[str, str, str | None, int | None]]:
    """Calls in a user-defined ``forward`` whose derivative is infinite at a boundary: (name, why, path, line)."""
    cls = type(module)
    forward = getattr(cls, "forward", None)
    try:
        path = inspect.getsourcefile(forward)  # type: ignore[arg-type]
        if path is None or not is_user_file(os.path.abspath(path)):
            return []
        lines, start = inspect.getsourcelines(forward)  # type: ignore[arg-type]
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return []
    found: list[tuple[str, str, str | None, int | None]] = []
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name == "pow" and node.args:
                exponent = node.args[-1]
                if not (isinstance(exponent, ast.Constant) and isinstance(exponent.value, float)
                        and 0 < exponent.value < 1):
                    name = None
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            exponent = node.right
            if isinstance(exponent, ast.Constant) and isinstance(exponent.value, float) and 0 < exponent.value < 1:
                name = "pow"
        if name in _RISKY_CALLS:
            label = "** (fractional power)" if isinstance(node, ast.BinOp) else name
            found.append((label, _RISKY_CALLS[name], path, start + node.lineno - 1))  # type: ignore[union-attr]
    found.sort(key=lambda f: f[3] or 0)
    return found


def _dispatch_mode_class() -> type:
    from torch.utils._python_dispatch import TorchDispatchMode

    class FirstBadOp(TorchDispatchMode):
        """Runs each aten op and stops at the first whose output holds NaN/+inf from inputs that did not."""

        def __init__(self, stop_frame: Any) -> None:
            super().__init__()
            self.stop_frame = stop_frame
            self.hit: _OpHit | None = None
            self.neginf_origin: tuple[str, str | None, int | None] | None = None

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            import torch
            from torch.utils._pytree import tree_leaves

            kwargs = kwargs or {}
            ins = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and t.is_floating_point()]
            ins_bad = any(_is_bad(t) for t in ins) if func._schema.is_mutable else None  # before `x.log_()` writes
            out = func(*args, **kwargs)
            if "empty" in func.__name__ or func.__name__.startswith(("resize", "set_")):
                return out  # uninitialised memory, filled by a later op
            outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]
            if not outs:
                return out
            if ins_bad is None:
                ins_bad = any(_is_bad(t) for t in ins)
            if not ins_bad and any(_is_bad(t) for t in outs):
                path, line = _user_frame(self.stop_frame)
                self.hit = _OpHit(op=_pretty_op(str(func)), dtype=str(outs[0].dtype).replace("torch.", ""),
                                  path=path, line=line, neginf_input=any(_has_neginf(t) for t in ins),
                                  neginf_origin=self.neginf_origin)
                raise _FoundIt()
            if self.neginf_origin is None and any(_has_neginf(t) for t in outs) \
                    and not any(_has_neginf(t) for t in ins):
                path, line = _user_frame(self.stop_frame)
                self.neginf_origin = (_pretty_op(str(func)), path, line)
            return out

    return FirstBadOp


def _where(path: str | None, line: int | None) -> str:
    return f" ({os.path.basename(path)}:{line})" if path and line else ""


class _Deferred:
    """A per-step gradient check computed on the device, read later without stalling the stream (at once on CPU)."""

    def __init__(self, value: Any, step: int, params: list[Any]) -> None:
        import torch

        self.step = step
        self.params = params  # alive anyway (the model holds them); dropped at the next poll
        self.event = None
        if value.device.type == "cuda":
            self.host = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
            self.host.copy_(value, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record(torch.cuda.current_stream(value.device))
        else:
            self.host = value

    def ready(self) -> bool:
        return self.event is None or bool(self.event.query())

    def value(self) -> list[float]:
        if self.event is not None:
            self.event.synchronize()  # at the end of the run only; otherwise read once ready()
        return self.host.tolist()


def _version(t: Any) -> int:
    """``t._version``; -1 for a tensor made under ``inference_mode``, which has no version counter (it
    never reaches a backward, so an in-place change of it does not matter here)."""
    try:
        return t._version
    except RuntimeError:  # "Inference tensors do not track version counter"
        return -1


# ------------------------------------------------------------------------------------------ watcher
class NonFinite(Watcher):
    """Finds the first module whose forward output or backward input gradient turns NaN/inf."""

    name = "nonfinite"
    checks = (FORWARD, BACKWARD)
    unsampled_calls = "roots"   # every call while armed

    def __init__(self) -> None:
        super().__init__()
        self._on = False                      # this outermost forward is recorded
        self._armed_until = -1
        self._armed_at = -1                   # armed during this step: every call delivered from the next
        self._stack: list[_Call] = []
        self._calls: list[_Call] = []         # completion order
        self._entries: list[_Entry] = []
        self._by_id: dict[int, int] = {}      # id(tensor) -> entry index, this outermost forward
        # backward side, kept from the first forward after a step until the next one
        # A backward may run through a graph built before the last step (a GAN's generator output is
        # reused after the discriminator stepped): the previous table is kept one iteration longer.
        self._bw = _BwTable()
        self._bw_prev: _BwTable | None = None
        self._fire_order = itertools.count()
        self._held = 0                        # bytes of activation gradients held unreduced
        self._stepped = False
        self._forward_bad_this_step = False
        self._recorded = False                       # a forward of this iteration was recorded
        self._bad_update_steps: list[int] = []       # steps whose update applied non-finite gradients
        self._unlocated: dict | None = None          # a non-finite step seen without its module
        self._pending: list[_Deferred] = []
        self._reruns = 0
        self._reports = {FORWARD.code: 0, BACKWARD.code: 0}
        self._dispatch_mode: type | None = None
        self._patches: list[Patch] = []
        # (total norm, {id(grad): (weak grad, version)}) of the last clip_grad_norm_ on CPU (see _clip_says_finite)
        self._clipped: tuple[Any, dict[int, tuple[weakref.ref, int]]] | None = None

    def attach(self, session: Any) -> None:
        super().attach(session)
        global _torch
        import torch
        from torch.nn import utils

        _torch = torch

        self._patches.append(Patch(utils, "clip_grad_norm_", self._wrap_clip))

    def _wrap_clip(self, original: Any) -> Any:
        def clip_grad_norm_(parameters: Any, max_norm: Any, norm_type: Any = 2.0, *args: Any, **kwargs: Any) -> Any:
            import torch

            params = parameter_list(parameters)
            total = original(params, max_norm, norm_type, *args, **kwargs)
            self._clipped = None
            if type(total) is not torch.Tensor or total.device.type != "cpu" or self._recorded:
                return total
            try:  # a 0-norm counts NaN as non-zero; a NaN max_norm makes every gradient NaN
                trusted = float(norm_type) >= 1 and math.isfinite(max_norm)
            except (TypeError, ValueError, RuntimeError):
                trusted = False
            if trusted:
                kept = {id(g): (weakref.ref(g), g._version) for p in params if (g := p.grad) is not None}
                self._clipped = (total, kept)
            return total
        return clip_grad_norm_

    # -------------------------------------------------------------------------------- forward
    def on_forward_pre(self, module: Any, args: tuple) -> None:
        session = self.session
        if session.depth == 1:
            if not (self._stepped or self._on or session.sampled or self._armed_until > session.step):
                return  # the usual unsampled model call: nothing to record, nothing to reset
            self._begin_outermost()
        if not self._on:
            return
        # Every module call of a recorded step comes here: few allocations (each one counts towards the
        # garbage collector's next pass) and no call that can be saved.
        stack = self._stack
        grad_mode = _torch.is_grad_enabled()
        call = _Call(module, stack[-1] if stack else None, args if grad_mode else None, None)
        tensors = _tensors(args[0] if len(args) == 1 else args)
        if tensors:
            call.autocast = _autocast_at_call(tensors[0])
            ins = []
            for t in tensors:
                i = self._entry(t, grad_mode)
                if i >= 0:
                    ins.append(i)
            call.ins = ins
            if ins and vars(module).get("inplace") is True:  # nn.ReLU(inplace=True) & co. overwrite their input:
                _reduce_now([self._entries[i] for i in ins])  # take its values before they go
        stack.append(call)

    def on_forward(self, module: Any, args: tuple, output: Any) -> None:
        if not self._stack:
            return
        call = self._stack[-1]
        if call.module is not module:  # a call recorded before sampling switched; unwind to it
            if not any(c.module is module for c in self._stack):
                return
            while self._stack and self._stack[-1].module is not module:
                self._stack.pop()
            call = self._stack[-1]
        self._stack.pop()
        if output is not None:
            grad_mode = _torch.is_grad_enabled()
            outs = []
            for t in _tensors(output):
                i = self._entry(t, grad_mode)
                if i >= 0:
                    outs.append(i)
            call.outs = outs
            self._calls.append(call)
        if not self._stack:
            self._end_outermost()

    def _begin_outermost(self) -> None:
        session = self.session
        if self._stepped:  # a new iteration: the backward of the last one is over
            bw = self._bw
            if bw.size or bw.calls or bw.fired:
                self._bw_prev, self._bw = bw, _BwTable()
                # What fired before the step was read there if it was non-finite; a backward through the old
                # graph fires into it again from here.
                bw.forget_fired()
            else:  # nothing was recorded (the usual unsampled step): nothing to keep, nothing to allocate
                self._bw_prev = None
            self._held = 0
            self._stepped = False
            self._forward_bad_this_step = False
            self._recorded = False
        armed = self._armed_at < session.step < self._armed_until
        if session.sampled and session.periodic and not armed:
            # A training forward's NaN reaches the gradients, checked on every step; nothing else would see
            # an evaluation's.
            self._on = not _torch.is_grad_enabled()
        else:
            self._on = session.sampled or armed
            self._recorded = self._recorded or self._on
        self._stack.clear()

    def _entry(self, t: Any, grad_mode: bool) -> int:
        """Index of ``t``'s entry, made on first sight (or after an in-place change)."""
        key = id(t)
        try:
            version = t._version
        except RuntimeError:  # an inference tensor (see _version)
            version = -1
        entries = self._entries
        index = self._by_id.get(key)
        if index is not None:
            entry = entries[index]
            if entry.version == version and entry.tensor is t:
                return index
        if len(entries) >= MAX_ENTRIES:
            return -1
        if grad_mode:  # held anyway: reduced only if the model's output is bad (most forwards: never)
            if not _reducible(t):
                return -1
            reduced = None
        else:
            reduced = _reduce(t)
            if reduced is None:
                return -1
        entry = _Entry(t, version, reduced, grad_mode)
        table = self._bw
        if grad_mode and table.open and t.grad_fn is not None:
            entry.bw = table.size
            table.size += 1
            t.register_hook(_GradHook(self, table, entry.bw))
        index = len(entries)
        entries.append(entry)
        self._by_id[key] = index
        return index

    def _reduce_held(self) -> None:
        for table in (self._bw_prev, self._bw):
            if table is not None:
                table.reduce_held()
        self._held = 0

    def _end_outermost(self) -> None:
        """The outermost call returned: read this forward's reductions once and look for a culprit."""
        entries, calls = self._entries, self._calls
        try:
            if entries:
                self._link_backward(calls, entries)
                outermost = calls[-1] if calls else None
                if outermost is not None and outermost.parent is None:
                    _settle([entries[i] for i in outermost.outs])
                    if any(entries[i].bad for i in outermost.outs):
                        _settle(entries)
                        self._analyse_forward(calls, entries)
        finally:
            self._entries = []
            self._calls = []
            self._by_id = {}
            self._stack.clear()
            if self._bw.size >= MAX_ENTRIES:
                self._bw.open = False

    def _link_backward(self, calls: list[_Call], entries: list[_Entry]) -> None:
        table = self._bw
        if not table.size:
            return
        base = len(table.calls)
        position = {id(call): base + i for i, call in enumerate(calls)}
        for call in calls:
            table.calls.append((call.module, None if call.parent is None else position.get(id(call.parent)),
                                call.root, [entries[i].bw for i in call.ins if entries[i].bw >= 0],
                                [entries[i].bw for i in call.outs if entries[i].bw >= 0]))

    def _analyse_forward(self, calls: list[_Call], entries: list[_Entry]) -> None:
        outermost = calls[-1] if calls else None
        if outermost is None or outermost.parent is not None or not any(entries[i].bad for i in outermost.outs):
            return  # no NaN/inf left the model: a module that makes one and a later one that masks it is fine
        culprit = None
        for call in calls:
            if any(entries[i].bad for i in call.outs) and all(
                    entries[i].total is not None and not entries[i].bad for i in call.ins):
                culprit = call  # (an input changed in place since it was seen is unknown: not this one)
                break
        if culprit is None:
            roots = [c for c in calls if c.parent is None]
            bad_input = next((c for c in roots if any(entries[i].bad for i in c.ins)), None)
            if bad_input is not None:
                if not self._forward_bad_this_step:  # else it is the output of a model called before
                    self._report_bad_input(bad_input, entries)
                self._forward_bad_this_step = True
            return
        self._forward_bad_this_step = True
        self._report_forward(culprit, entries)

    def _location(self, root: Any) -> tuple[str | None, int | None]:
        return self.session.root_call_sites.get(id(root), (None, None))

    def _report_bad_input(self, call: _Call, entries: list[_Entry]) -> None:
        if self._reports[FORWARD.code] >= MAX_REPORTS:
            return
        name = self.session.names.module(call.module)
        what = "NaN" if any(entries[i].nan for i in call.ins) else "inf"
        path, line = self._location(call.module)
        finding = self.session.report(
            FORWARD,
            f"the input given to `{name}` already holds {what} at step {self.session.step}: it comes from the "
            "data or from the code before the model, not from a module",
            subject=f"input of {name}", path=path, line=line,
            fix="check the batch (e.g. `torch.isfinite(x).all()` in the data pipeline) and the preprocessing "
                "(normalising by a zero std, log of 0)")
        if finding is not None:
            self._reports[FORWARD.code] += 1

    def _report_forward(self, call: _Call, entries: list[_Entry]) -> None:
        if self._reports[FORWARD.code] >= MAX_REPORTS:
            return
        module = call.module
        name = self.session.names.module(module)
        bad_params = self._nonfinite_params(module)
        if bad_params:
            if self._bad_update_steps:
                self._report_unlocated(force=True)
                return  # a consequence of the update reported there
            path, line = self._location(call.root)
            finding = self.session.report(
                FORWARD,
                f"`{name}` outputs NaN/inf at step {self.session.step} because its parameter `{bad_params[0]}` "
                "already holds NaN/inf",
                subject=name, path=path, line=line,
                fix="the parameter was non-finite before this step (a checkpoint, an initialisation, or an update "
                    "torchpact did not see): check where it was last written")
            if finding is not None:
                self._reports[FORWARD.code] += 1
            return
        if not self._confirmed(call, entries):
            return
        what = "NaN" if any(entries[i].nan for i in call.outs) else "inf"
        neginf_in = any(entries[i].neginf for i in call.ins)
        hit = self._find_op(call)
        path, line = self._location(call.root)
        message = f"the output of `{name}` became {what} at step {self.session.step} although its inputs were finite"
        if neginf_in:
            message = (f"the output of `{name}` became {what} at step {self.session.step} from inputs without "
                       "NaN/+inf (they hold -inf)")
        fix = "clamp or guard the op that produces it (add an eps to denominators, clamp log/sqrt arguments)"
        op_info: dict[str, Any] = {}
        if hit is not None:
            message += f", first in `{hit.op}`{_where(hit.path, hit.line)}"
            if hit.neginf_input and hit.neginf_origin is not None and hit.neginf_origin[0] != hit.op:
                origin_op, opath, oline = hit.neginf_origin
                message += f", whose input holds -inf made by `{origin_op}`{_where(opath, oline)}"
            elif hit.neginf_input:
                message += ", whose input holds -inf"
            fix = self._op_fix(hit) or fix
            op_info = {"op": hit.op, "op_path": hit.path, "op_line": hit.line, "dtype": hit.dtype}
        finding = self.session.report(FORWARD, message, subject=name, path=path, line=line, fix=fix, **op_info)
        if finding is not None:
            self._reports[FORWARD.code] += 1

    @staticmethod
    def _confirmed(call: _Call, entries: list[_Entry]) -> bool:
        """A bad sum may be a float32 overflow of finite values: check the output itself while it is unchanged."""
        import torch

        for i in call.outs:
            entry = entries[i]
            if not entry.bad:
                continue
            t = entry.tensor
            if t is None or _version(t) != entry.version:
                return True  # changed in place since: trust the sum
            with torch.no_grad():
                if bool((torch.isnan(t) | torch.isposinf(t)).any()):
                    return True
        return False

    @staticmethod
    def _op_fix(hit: _OpHit) -> str | None:
        if hit.dtype == "float16" and (hit.op in _MATMUL_OPS or hit.op in ("exp", "pow", "sum", "mul", "add")):
            return ("float16 overflows above 65504: run this op in float32 (`with torch.autocast(..., "
                    "enabled=False):` and `.float()` inputs) or use bfloat16")
        if hit.op in ("log", "log2", "log10", "log1p", "xlogy"):
            return _OP_HINTS["log"]
        if hit.op in ("softmax", "log_softmax") or (hit.neginf_input and hit.op in ("sub", "add", "mul")):
            return _OP_HINTS["softmax"] if "softmax" in hit.op else _OP_HINTS.get(hit.op)
        return _OP_HINTS.get(hit.op)

    def _nonfinite_params(self, module: Any) -> list[str]:
        """Full names of the module's parameters and buffers that hold NaN/inf."""
        import torch

        names = self.session.names
        prefix = names.module(module)
        out = []
        with torch.no_grad():
            for pname, t in list(module.named_parameters()) + list(module.named_buffers()):
                if t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()):
                    out.append(names.param(t) if names.has_param(t) else f"{prefix}.{pname}")
        return out

    def _find_op(self, call: _Call) -> _OpHit | None:
        """Re-run ``call``'s module alone on a private copy of its inputs; None when not safely possible."""
        import torch
        from torch.utils._pytree import tree_map

        if self._reruns >= MAX_RERUNS or call.args is None:
            return None  # under no_grad the inputs were not kept
        entries_ok = all(not isinstance(a, torch.Tensor) or _version(a) == self._version_at_call(call, a)
                         for a in _flat(call.args))
        if not entries_ok or _module_bytes(call.module) > MAX_RERUN_BYTES:
            return None
        self._reruns += 1
        if self._dispatch_mode is None:
            self._dispatch_mode = _dispatch_mode_class()
        devices = {t.device for t in _flat(call.args) if isinstance(t, torch.Tensor)}
        devices.update(t.device for t in list(call.module.parameters()) + list(call.module.buffers()))
        if any(d.type not in ("cpu", "cuda") for d in devices):
            return None  # its RNG state could not be restored
        cuda_devices = sorted({d.index or 0 for d in devices if d.type == "cuda"})
        try:
            copy = _private_copy(call.module, {})
            args = tree_map(lambda a: a.detach().clone() if isinstance(a, torch.Tensor) else a, call.args)
        except Exception:  # noqa: BLE001 - a module torchpact cannot copy is simply not re-run
            return None
        mode = self._dispatch_mode(sys._getframe())
        with torch.random.fork_rng(devices=cuda_devices), torch.no_grad():
            autocast = call.autocast
            if autocast is AUTOCAST_OFF:
                device = next((t.device.type for t in _flat(call.args) if isinstance(t, torch.Tensor)), "cpu")
                autocast = (device, False, None)
            context = (torch.autocast(autocast[0], dtype=autocast[2], enabled=autocast[1])  # type: ignore[arg-type]
                       if autocast is not None else contextlib.nullcontext())
            try:
                with context, mode:
                    copy(*args)
            except _FoundIt:
                pass
            except Exception:  # noqa: BLE001 - it needs kwargs or state torchpact did not keep: no op, no harm
                return mode.hit
        return mode.hit

    def _version_at_call(self, call: _Call, t: Any) -> int:
        for i in call.ins:
            entry = self._entries[i] if i < len(self._entries) else None
            if entry is not None and entry.tensor is t:
                return entry.version
        return _version(t)

    # -------------------------------------------------------------------------------- step
    def on_step_pre(self, optimizer: Any) -> None:
        import torch

        if getattr(optimizer, "found_inf", None) is not None:
            return  # a GradScaler-aware optimizer: grads are still scaled and it skips inf steps itself
        if self._pending:
            self._poll()
        params, grads = dense_grads(optimizer)
        clipped, self._clipped = self._clipped, None
        if not params:
            return  # (sharded DTensor gradients are left to the distributed checks)
        if clipped is not None and not self._recorded and self._clip_says_finite(clipped, grads):
            return
        if not self._recorded and not self.session.sampled and surely_finite(grads):
            return  # the usual unsampled step of a small model: no norm per gradient
        # on sampled steps grad_health and gradient_flow read the same norms in this hook
        norms = grad_norms(grads, self.session.shared if self.session.sampled else None)
        step = self.session.step
        if not self._recorded and norms.device.type == "cuda":
            self._pending.append(_Deferred(norms, step, params))  # read once ready: no sync per step
            return
        if not self._recorded:
            self._check_pending(_Deferred(norms, step, params))  # on CPU: read now, nothing to overlap with
            return
        values = norms.tolist()
        bad = [p for p, v in zip(params, values) if not math.isfinite(v)]
        if not bad:
            return
        bad = [p for p in bad if not bool(torch.isfinite(p.grad).all())]  # a norm can overflow; values cannot
        if not bad:
            return
        self._bad_update_steps.append(step)
        if self._forward_bad_this_step:
            return  # the forward was already non-finite: reported as TP351
        self._analyse_backward(bad)

    @staticmethod
    def _clip_says_finite(clipped: tuple[Any, dict[int, tuple[weakref.ref, int]]], grads: list[Any]) -> bool:
        """Whether the total norm the script's own ``clip_grad_norm_`` just computed over these very gradients
        (same tensors, unchanged since: the clip's own scaling is counted in the versions kept) is finite.
        A p-norm (p >= 1, or inf) of finite values is finite or overflows to inf, and NaN or inf in any of
        them makes it non-finite; scaling by a finite factor of at most 1 keeps them finite. So one read
        of a number already computed replaces this step's per-tensor norms (HF Trainer and most LM
        scripts clip every step); otherwise, or when it is not finite, the gradients are checked as usual."""
        total, kept = clipped
        for g in grads:
            seen = kept.get(id(g))
            if seen is None or seen[0]() is not g or g._version != seen[1]:
                return False
        return math.isfinite(total.item())

    def on_step(self, optimizer: Any) -> None:
        self._stepped = True

    def on_step_end(self, step: int) -> None:
        self._stepped = True
        self._poll()
        if step + 1 >= self._armed_until:
            self.unsampled_calls = "roots"

    def on_close(self) -> None:
        remove_all(self._patches)
        self._clipped = None
        for pending in self._pending:
            self._check_pending(pending)
        self._pending.clear()
        self._report_unlocated(force=True)
        # The last iterations' calls hold the script's modules and graph-attached tensors: under DDP the
        # Reducer and its process group would live on into the interpreter's teardown, where
        # ~ProcessGroupGloo can block joining its threads (a rank that never exits).
        self._stack, self._calls, self._entries, self._by_id = [], [], [], {}
        self._bw, self._bw_prev = _BwTable(open=False), None

    def _poll(self) -> None:
        while self._pending and self._pending[0].ready():
            self._check_pending(self._pending.pop(0))

    def _check_pending(self, pending: _Deferred) -> None:
        values = pending.value()
        if all(math.isfinite(v) for v in values):
            return
        params = [p for p, v in zip(pending.params, values) if not math.isfinite(v)]
        if pending.step == self.session.step:  # still this step's gradients: a norm can overflow, values cannot
            import torch

            params = [p for p in params if p.grad is not None and not bool(torch.isfinite(p.grad).all())]
            if not params:
                return
        if self._armed_until <= self.session.step:
            self._armed_at = self.session.step
        self._armed_until = max(self._armed_until, self.session.step + ARMED_STEPS)
        self.unsampled_calls = "all"
        self._bad_update_steps.append(pending.step)
        if self._unlocated is None:
            self._unlocated = {"step": pending.step, "params": [self.session.names.param(p) for p in params]}

    def _report_unlocated(self, force: bool = False) -> None:
        info = self._unlocated
        if info is None or self._reports[BACKWARD.code] >= MAX_REPORTS or not force:
            return
        self._unlocated = None
        if self._located():
            return
        self._reports[BACKWARD.code] += 1
        self.session.report(
            BACKWARD,
            f"the gradients applied at step {info['step']} held NaN/inf; the modules of that step were not recorded "
            "(the first steps and the steps after a NaN/inf are), so the module where they arose is not known "
            "(the forward or the backward produced them)",
            subject="unrecorded step", step=info["step"],
            fix=f"rerun checking every step up to it (`torchpact run --sample-first {info['step'] + 1} ...`, or "
                f"`Sampler(first={info['step'] + 1})` from Python) to locate the module")

    def _located(self) -> bool:
        return any(f.code in (FORWARD.code, BACKWARD.code) and f.subject != "unrecorded step"
                   for f in self.session.findings)

    # -------------------------------------------------------------------------------- backward
    def _analyse_backward(self, bad_params: list[Any]) -> None:
        if self._reports[BACKWARD.code] >= MAX_REPORTS:
            return
        tables = [t for t in (self._bw_prev, self._bw) if t is not None]
        self._reduce_held()
        fired = sorted(((order, k, index, reduced) for k, table in enumerate(tables)
                        for order, index, reduced in list(table.fired) if reduced is not None),
                       key=lambda item: item[0])
        values = _read([item[3] for item in fired]) if fired else []
        first = None
        for (_, k, index, _), v in zip(fired, values):
            if not math.isfinite(v):
                first = (tables[k], index, "NaN" if math.isnan(v) else "inf")
                break
        fired_ok = {(id(tables[k]), index) for (_, k, index, _), v in zip(fired, values) if math.isfinite(v)}
        session = self.session
        step = session.step
        param_names = [session.names.param(p) for p in bad_params]
        shown = ", ".join(f"`{n}`" for n in param_names[:3]) + (f" and {len(param_names) - 3} more"
                                                                 if len(param_names) > 3 else "")
        if first is None:
            owner = _owner(param_names[0], session)
            subject = owner or param_names[0]
            message = (f"the gradient of {shown} is NaN/inf at step {step} while the activation gradients were "
                       f"finite: it arises in the backward of the ops that use these parameters directly"
                       + (f" in `{owner}`" if owner else ""))
            module = _module_named(owner, session) if owner else None
            self._emit_backward(subject, message, module, None)
            return
        table, index, what = first
        cache: dict[int, _BwCall] = {}
        consumers = [table.call(j, cache) for j, rec in enumerate(table.calls) if index in rec[3]]
        consumers = [c for c in consumers if c.module() is not None
                     and (not c.outs or all((id(table), i) in fired_ok for i in c.outs))]
        innermost = [c for c in consumers if not any(c.is_ancestor_of(o) for o in consumers if o is not c)]
        if innermost:
            call = innermost[0]
            module = call.module()
            name = session.names.module(module)
            others = [session.names.module(c.module()) for c in innermost[1:] if c.module() is not None]
            message = (f"the gradient became {what} in the backward of `{name}` at step {step}: the gradient of "
                       f"its output was finite, the gradient of its input is {what}")
            if others:
                message += f" (the input is also used by {', '.join(f'`{o}`' for o in others)})"
            self._emit_backward(name, message, module, call.root())
            return
        producers = [table.call(j, cache) for j, rec in enumerate(table.calls) if index in rec[4]]
        producers = [c for c in producers if c.module() is not None]
        if producers:
            # the gradient came from code that uses the tensor outside every module that returned it
            outer = min(producers, key=_depth)
            name = session.names.module(outer.module())
            parent = outer.parent
            if parent is None or parent.module() is None:
                where = "after the model: the loss (or the code between the model's output and `backward()`)"
            else:
                where = f"in the forward of `{session.names.module(parent.module())}`, after `{name}` returns"
            message = (f"the gradient of the output of `{name}` is already {what} at step {step}: it arises in code "
                       f"{where}, outside any module")
            self._emit_backward(f"output of {name}", message, None, outer.root())
            return
        self._emit_backward(param_names[0], f"the gradient of {shown} is {what} at step {step}", None, None)

    def _emit_backward(self, subject: str, message: str, module: Any, root: Any) -> None:
        path, line = self._location(root) if root is not None else (None, None)
        fix = ("make the derivative finite where the forward is: `torch.sqrt(x + eps)` instead of `torch.sqrt(x)`, "
               "clamp `acos`/`asin` arguments into (-1, 1), mask inputs before (not after) an op whose gradient is "
               "infinite on the masked side")
        extra: dict[str, Any] = {}
        if module is not None:
            risky = _risky_calls(module)
            if risky:
                label, why, rpath, rline = risky[0]
                message += f"; its forward calls `{label}`{_where(rpath, rline)}, {why}"
                if len(risky) > 1:
                    message += " (also " + ", ".join(f"`{r[0]}`{_where(r[2], r[3])}" for r in risky[1:3]) + ")"
                extra = {"op": label, "op_path": rpath, "op_line": rline}
        finding = self.session.report(BACKWARD, message, subject=subject, path=path, line=line, fix=fix, **extra)
        if finding is not None:
            self._reports[BACKWARD.code] += 1
            self._unlocated = None


def _flat(args: Any) -> list[Any]:
    from torch.utils._pytree import tree_leaves

    return tree_leaves(args)


def _depth(call: _BwCall) -> int:
    d, p = 0, call.parent
    while p is not None:
        d, p = d + 1, p.parent
    return d


def _owner(param_name: str, session: Any) -> str | None:
    """The qualified name of the module holding a parameter (``a.b.weight`` -> ``a.b``)."""
    return param_name.rsplit(".", 1)[0] if "." in param_name else None


def _module_named(name: str, session: Any) -> Any:
    for root in session.names.root_modules():
        try:
            return root.get_submodule(name)
        except AttributeError:
            continue
    return None
