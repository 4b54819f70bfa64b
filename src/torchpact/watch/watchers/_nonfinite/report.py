"""The findings of the nonfinite watcher: what was found, put in words (nothing is computed here)."""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from torchpact.watch.watchers._nonfinite.backward import Blame
from torchpact.watch.watchers._nonfinite.checks import BACKWARD, FORWARD
from torchpact.watch.watchers._nonfinite.opsearch import OpHit, risky_calls
from torchpact.watch.watchers._nonfinite.recorder import Call, Entry

MAX_REPORTS = 5           # per check: after that the run is beyond repair and more findings are noise

OP_HINTS = {
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
MATMUL_OPS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "convolution", "conv2d", "conv1d",
              "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
              "_scaled_dot_product_flash_attention", "_scaled_dot_product_cudnn_attention"}
BACKWARD_FIX = ("make the derivative finite where the forward is: `torch.sqrt(x + eps)` instead of `torch.sqrt(x)`, "
                "clamp `acos`/`asin` arguments into (-1, 1), mask inputs before (not after) an op whose gradient is "
                "infinite on the masked side")
UNRECORDED = "unrecorded step"
SAME_STATE = "on the same inputs, parameters and RNG state"


class Replayed(NamedTuple):
    """What a replay of an unrecorded step showed about itself (see ``replay.py``)."""

    calls: int                  # model calls replayed
    outputs: bool               # its outputs were compared with the step's (and equal: else it shows nothing)
    exact: bool | None          # its gradients equal the step's bit for bit; None: not compared
    differing: list[str]        # parameters whose gradients differ from the step's
    clipped: bool               # the script clipped the gradients after backward (not compared then)
    caveats: list[str]          # what the replay left out (module hooks, a wrapper)

    def label(self) -> str:
        return "exact" if self.exact else "not compared" if self.exact is None else "differs"

    def fidelity(self) -> str:
        equal = [what for what, yes in (("outputs", self.outputs), ("gradients", self.exact and not self.clipped))
                 if yes]
        text = f", whose {' and '.join(equal)} equal the step's bit for bit" if equal else ""
        if self.clipped:
            return text + " (gradients not compared: `clip_grad_norm_` changed the step's since)"
        if self.exact is False:
            shown = ", ".join(f"`{n}`" for n in self.differing[:3]) + (" and others" if len(self.differing) > 3 else "")
            text += (f"; its gradients differ from the step's (in {shown}): non-deterministic kernels, or code that "
                     "changes gradients between `backward()` and `step()`")
        return text

    def note(self, step: int) -> str:
        calls = f"{self.calls} model call{'s' if self.calls != 1 else ''}"
        text = (f"; step {step} was not recorded: this was seen in its replay before the update ({calls} "
                f"{SAME_STATE}){self.fidelity()}")
        return text + "".join(f"; {c}" for c in self.caveats)


def where(path: str | None, line: int | None) -> str:
    return f" ({os.path.basename(path)}:{line})" if path and line else ""


def op_fix(hit: OpHit) -> str | None:
    if hit.dtype == "float16" and (hit.op in MATMUL_OPS or hit.op in ("exp", "pow", "sum", "mul", "add")):
        return ("float16 overflows above 65504: run this op in float32 (`with torch.autocast(..., "
                "enabled=False):` and `.float()` inputs) or use bfloat16")
    if hit.op in ("log", "log2", "log10", "log1p", "xlogy"):
        return OP_HINTS["log"]
    if hit.op in ("softmax", "log_softmax") or (hit.neginf_input and hit.op in ("sub", "add", "mul")):
        return OP_HINTS["softmax"] if "softmax" in hit.op else OP_HINTS.get(hit.op)
    return OP_HINTS.get(hit.op)


class Reporter:
    """Reports through the session, at most ``MAX_REPORTS`` per check; remembers a step not yet located."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.counts = {FORWARD.code: 0, BACKWARD.code: 0}
        self.unlocated: dict | None = None   # a non-finite step seen without its module
        self._replayed: Replayed | None = None

    def full(self, code: str) -> bool:
        return self.counts[code] >= MAX_REPORTS

    def location(self, root: Any) -> tuple[str | None, int | None]:
        return self.session.root_call_sites.get(id(root), (None, None))

    def _report(self, check: Any, message: str, **kwargs: Any) -> Any:
        finding = self.session.report(check, message, **kwargs)
        if finding is not None:
            self.counts[check.code] += 1
        return finding

    # -------------------------------------------------------------------------------- forward
    def bad_input(self, call: Call, entries: list[Entry], replayed: Replayed | None = None) -> None:
        if self.full(FORWARD.code):
            return
        name = self.session.names.module(call.module)
        what = "NaN" if any(entries[i].nan for i in call.ins) else "inf"
        path, line = self.location(call.module)
        self._report(
            FORWARD,
            f"the input given to `{name}` already holds {what} at step {self.session.step}: it comes from the "
            "data or from the code before the model, not from a module" + _note(replayed, self.session.step),
            subject=f"input of {name}", path=path, line=line, **_extra(replayed),
            fix="check the batch (e.g. `torch.isfinite(x).all()` in the data pipeline) and the preprocessing "
                "(normalising by a zero std, log of 0)")

    def stale_parameter(self, call: Call, param: str, replayed: Replayed | None = None) -> None:
        name = self.session.names.module(call.module)
        path, line = self.location(call.root)
        self._report(
            FORWARD,
            f"`{name}` outputs NaN/inf at step {self.session.step} because its parameter `{param}` "
            "already holds NaN/inf" + _note(replayed, self.session.step),
            subject=name, path=path, line=line, **_extra(replayed),
            fix="the parameter was non-finite before this step (a checkpoint, an initialisation, or an update "
                "torchpact did not see): check where it was last written")

    def forward(self, call: Call, entries: list[Entry], hit: OpHit | None, replayed: Replayed | None = None) -> None:
        name = self.session.names.module(call.module)
        step = self.session.step
        what = "NaN" if any(entries[i].nan for i in call.outs) else "inf"
        path, line = self.location(call.root)
        message = f"the output of `{name}` became {what} at step {step} although its inputs were finite"
        if any(entries[i].neginf for i in call.ins):
            message = (f"the output of `{name}` became {what} at step {step} from inputs without NaN/+inf "
                       "(they hold -inf)")
        fix = "clamp or guard the op that produces it (add an eps to denominators, clamp log/sqrt arguments)"
        op_info: dict[str, Any] = {}
        if hit is not None:
            message += f", first in `{hit.op}`{where(hit.path, hit.line)}"
            if hit.neginf_input and hit.neginf_origin is not None and hit.neginf_origin[0] != hit.op:
                origin_op, opath, oline = hit.neginf_origin
                message += f", whose input holds -inf made by `{origin_op}`{where(opath, oline)}"
            elif hit.neginf_input:
                message += ", whose input holds -inf"
            fix = op_fix(hit) or fix
            op_info = {"op": hit.op, "op_path": hit.path, "op_line": hit.line, "dtype": hit.dtype}
        message += _note(replayed, step)
        self._report(FORWARD, message, subject=name, path=path, line=line, fix=fix, **op_info, **_extra(replayed))

    # -------------------------------------------------------------------------------- backward
    def backward(self, blame: Blame, bad_params: list[str], replayed: Replayed | None = None) -> None:
        """Report where a step's non-finite gradient arose (``blame``); ``bad_params``: the parameters
        whose gradient is non-finite."""
        self._replayed = replayed
        session = self.session
        step = session.step
        shown = ", ".join(f"`{n}`" for n in bad_params[:3]) + (f" and {len(bad_params) - 3} more"
                                                               if len(bad_params) > 3 else "")
        what = blame.what
        if blame.kind == "params":
            owner = bad_params[0].rsplit(".", 1)[0] if "." in bad_params[0] else None
            message = (f"the gradient of {shown} is NaN/inf at step {step} while the activation gradients were "
                       f"finite: it arises in the backward of the ops that use these parameters directly"
                       + (f" in `{owner}`" if owner else ""))
            self._emit_backward(owner or bad_params[0], message, _module_named(owner, session) if owner else None,
                                None)
        elif blame.kind == "module":
            call, *others = blame.calls
            module = call.module()
            name = session.names.module(module)
            also = [session.names.module(c.module()) for c in others if c.module() is not None]
            message = (f"the gradient became {what} in the backward of `{name}` at step {step}: the gradient of "
                       f"its output was finite, the gradient of its input is {what}")
            if also:
                message += f" (the input is also used by {', '.join(f'`{o}`' for o in also)})"
            self._emit_backward(name, message, module, call.root())
        elif blame.kind == "outside":
            outer = blame.calls[0]
            name = session.names.module(outer.module())
            parent = outer.parent
            if parent is None or parent.module() is None:
                place = "after the model: the loss (or the code between the model's output and `backward()`)"
            else:
                place = f"in the forward of `{session.names.module(parent.module())}`, after `{name}` returns"
            message = (f"the gradient of the output of `{name}` is already {what} at step {step}: it arises in code "
                       f"{place}, outside any module")
            self._emit_backward(f"output of {name}", message, None, outer.root())
        else:
            self._emit_backward(bad_params[0], f"the gradient of {shown} is {what} at step {step}", None, None)

    def _emit_backward(self, subject: str, message: str, module: Any, root: Any) -> None:
        path, line = self.location(root) if root is not None else (None, None)
        extra: dict[str, Any] = _extra(self._replayed)
        note = _note(self._replayed, self.session.step)
        if module is not None:
            risky = risky_calls(module)
            if risky:
                label, why, rpath, rline = risky[0]
                message += f"; its forward calls `{label}`{where(rpath, rline)}, {why}"
                if len(risky) > 1:
                    message += " (also " + ", ".join(f"`{r[0]}`{where(r[2], r[3])}" for r in risky[1:3]) + ")"
                extra.update(op=label, op_path=rpath, op_line=rline)
        message += note
        if self._report(BACKWARD, message, subject=subject, path=path, line=line, fix=BACKWARD_FIX, **extra):
            self.unlocated = None

    # -------------------------------------------------------------------------------- unrecorded steps
    def note_unlocated(self, step: int, params: list[str], why: str, replay: str) -> None:
        """A step whose gradients are non-finite and whose origin is not known: ``why`` (words that follow
        "the modules of that step were not recorded"), ``replay`` ("failed", "finite", "differs", "unchecked",
        "none")."""
        if self.unlocated is None:
            self.unlocated = {"step": step, "params": params, "why": why, "replay": replay}

    @staticmethod
    def not_known() -> str:
        return ", so the module where they arose is not known (the forward or the backward produced them)"

    UNCOMPARED = ("its outputs could not be compared with the step's (changed in place after the call, or over "
                  "the 64 MB of outputs torchpact keeps)")

    @classmethod
    def unchecked(cls) -> str:
        return (f", and its replay could not be checked against the step: {cls.UNCOMPARED}; so the module where they "
                "arose is not known")

    @staticmethod
    def not_replayed(reason: str) -> str:
        return f", and it could not be replayed: {reason}; so the module where they arose is not known"

    @staticmethod
    def read_late() -> str:
        return (" and, on CUDA, their check is read after the update (without stalling the GPU), so the step is "
                "not replayed: the module where they arose is not known")

    @staticmethod
    def not_reproduced(replayed: Replayed, mismatched: list[str]) -> str:
        calls = f"{replayed.calls} model call{'s' if replayed.calls != 1 else ''}"
        shown = ", ".join(f"`{n}`" for n in mismatched[:3])
        return (f", and its replay before the update ({calls} {SAME_STATE}) did not reproduce it: the output of "
                f"{shown} differs from the step's (its forward reads state that changed since, such as a counter, "
                "another generator or `random`, or runs non-deterministic kernels), so the module where they arose "
                "is not known")

    @staticmethod
    def stayed_finite(replayed: Replayed, also: list[str], distributed: bool) -> str:
        calls = f"{replayed.calls} model call{'s' if replayed.calls != 1 else ''}"
        equal = ", with outputs equal to the step's bit for bit" if replayed.outputs else ""
        text = (f", and its replay before the update ({calls} {SAME_STATE}) stayed finite{equal}: they arose outside "
                "these calls (in code between `backward()` and `step()`: a gradient hook, an edit of `.grad`, clipping "
                "with a NaN `max_norm`)")
        if distributed:
            text += (" or on another rank (DistributedDataParallel averages the gradients of every rank, and each "
                     "rank replays its own calls: that rank's finding names the module)")
        return text + "".join(f"; {c}" for c in [*also, *replayed.caveats])

    def report_unlocated(self) -> None:
        info = self.unlocated
        if info is None or self.full(BACKWARD.code):
            return
        self.unlocated = None
        if self.located():
            return
        self.counts[BACKWARD.code] += 1
        self.session.report(
            BACKWARD,
            f"the gradients applied at step {info['step']} held NaN/inf; the modules of that step were not recorded "
            f"(the first steps and the steps after a NaN/inf are){info['why']}",
            subject=UNRECORDED, step=info["step"], replay=info["replay"],
            fix=f"rerun checking every step up to it (`torchpact run --sample-first {info['step'] + 1} ...`, or "
                f"`Sampler(first={info['step'] + 1})` from Python) to locate the module")

    def located(self) -> bool:
        return any(f.code in (FORWARD.code, BACKWARD.code) and f.subject != UNRECORDED
                   for f in self.session.findings)


def _note(replayed: Replayed | None, step: int) -> str:
    return replayed.note(step) if replayed is not None else ""


def _extra(replayed: Replayed | None) -> dict[str, Any]:
    return {"replay": replayed.label()} if replayed is not None else {}


def _module_named(name: str, session: Any) -> Any:
    for root in session.names.root_modules():
        try:
            return root.get_submodule(name)
        except AttributeError:
            continue
    return None
