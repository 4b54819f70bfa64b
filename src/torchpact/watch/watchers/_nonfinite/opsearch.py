"""Which op: the forward culprit re-run alone, and the risky calls in a module's source for the backward.

Forward. The culprit module is run again on a private copy (detached parameters, cloned buffers and
inputs, no hooks, RNG state saved and restored, the autocast state of the original call) under a
``TorchDispatchMode`` that names the first aten op whose output turns bad, with its source line.

Backward. The backward op is not re-run (that would need every module's inputs and output gradients
held through the backward); instead, for modules defined in the user's code, the calls in ``forward``
whose derivative is infinite at a boundary (sqrt at 0, acos at 1, ...) are named.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import os
import sys
import textwrap
from typing import Any, Callable, NamedTuple

from torchpact.watch.frames import is_user_file
from torchpact.watch.watchers._nonfinite import values
from torchpact.watch.watchers._nonfinite.recorder import Call
from torchpact.watch.watchers._nonfinite.values import AUTOCAST_OFF, flat, has_neginf, is_bad
from torchpact.watch.watchers._probe import private_copy

MAX_RERUNS = 3            # op searches per run (each costs a forward of one module with a sync per op)
MAX_RERUN_BYTES = 1 << 30

# Derivative infinite (or NaN) at a boundary of the domain although the value there is finite.
RISKY_CALLS = {
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


class OpHit(NamedTuple):
    """The first aten op of a re-run whose output turned bad."""

    op: str
    dtype: str
    path: str | None
    line: int | None
    neginf_input: bool
    neginf_origin: tuple[str, str | None, int | None] | None  # op, path, line that made the -inf


class FoundIt(Exception):
    pass


class OpSearch:
    """Re-runs of culprit modules under the dispatch mode, at most ``MAX_RERUNS`` per run."""

    def __init__(self) -> None:
        self.reruns = 0
        self._mode_class: type | None = None

    def find(self, call: Call, version_at_call: Callable[[Call, Any], int]) -> OpHit | None:
        """Re-run ``call``'s module alone on a private copy of its inputs; None when not safely possible."""
        torch = values.torch
        from torch.utils._pytree import tree_map

        if self.reruns >= MAX_RERUNS or call.args is None:
            return None  # under no_grad the inputs were not kept
        entries_ok = all(not isinstance(a, torch.Tensor) or values.version(a) == version_at_call(call, a)
                         for a in flat(call.args))
        if not entries_ok or module_bytes(call.module) > MAX_RERUN_BYTES:
            return None
        self.reruns += 1
        if self._mode_class is None:
            self._mode_class = _dispatch_mode_class()
        devices = {t.device for t in flat(call.args) if isinstance(t, torch.Tensor)}
        devices.update(t.device for t in list(call.module.parameters()) + list(call.module.buffers()))
        if any(d.type not in ("cpu", "cuda") for d in devices):
            return None  # its RNG state could not be restored
        cuda_devices = sorted({d.index or 0 for d in devices if d.type == "cuda"})
        try:
            copy = private_copy(call.module, {})
            args = tree_map(lambda a: a.detach().clone() if isinstance(a, torch.Tensor) else a, call.args)
            kwargs = tree_map(lambda a: a.detach().clone() if isinstance(a, torch.Tensor) else a, call.kwargs or {})
        except Exception:  # noqa: BLE001 - a module torchpact cannot copy is simply not re-run
            return None
        mode = self._mode_class(sys._getframe())
        with torch.random.fork_rng(devices=cuda_devices), torch.no_grad():
            if call.rng is not None:  # a replay knows the generator's state at the call: dropout draws the same
                torch.set_rng_state(call.rng)
            autocast = call.autocast
            if autocast is AUTOCAST_OFF:
                device = next((t.device.type for t in flat(call.args) if isinstance(t, torch.Tensor)), "cpu")
                autocast = (device, False, None)
            context = (torch.autocast(autocast[0], dtype=autocast[2], enabled=autocast[1])  # type: ignore[arg-type]
                       if autocast is not None else contextlib.nullcontext())
            try:
                with context, mode:
                    copy(*args, **kwargs)
            except FoundIt:
                pass
            except Exception:  # noqa: BLE001 - it needs kwargs or state torchpact did not keep: no op, no harm
                return mode.hit
        return mode.hit


def pretty_op(name: str) -> str:
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


def module_bytes(module: Any) -> int:
    total = 0
    for t in list(module.parameters()) + list(module.buffers()):
        total += t.numel() * t.element_size()
    return total


def risky_calls(module: Any) -> list[tuple[str, str, str | None, int | None]]:
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
        if name in RISKY_CALLS:
            label = "** (fractional power)" if isinstance(node, ast.BinOp) else name
            found.append((label, RISKY_CALLS[name], path, start + node.lineno - 1))  # type: ignore[union-attr]
    found.sort(key=lambda f: f[3] or 0)
    return found


def _dispatch_mode_class() -> type:
    from torch.utils._python_dispatch import TorchDispatchMode

    class FirstBadOp(TorchDispatchMode):
        """Runs each aten op and stops at the first whose output holds NaN/+inf from inputs that did not."""

        def __init__(self, stop_frame: Any) -> None:
            super().__init__()
            self.stop_frame = stop_frame
            self.hit: OpHit | None = None
            self.neginf_origin: tuple[str, str | None, int | None] | None = None

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            import torch
            from torch.utils._pytree import tree_leaves

            kwargs = kwargs or {}
            ins = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and t.is_floating_point()]
            ins_bad = any(is_bad(t) for t in ins) if func._schema.is_mutable else None  # before `x.log_()` writes
            out = func(*args, **kwargs)
            if "empty" in func.__name__ or func.__name__.startswith(("resize", "set_")):
                return out  # uninitialised memory, filled by a later op
            outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]
            if not outs:
                return out
            if ins_bad is None:
                ins_bad = any(is_bad(t) for t in ins)
            if not ins_bad and any(is_bad(t) for t in outs):
                path, line = _user_frame(self.stop_frame)
                self.hit = OpHit(op=pretty_op(str(func)), dtype=str(outs[0].dtype).replace("torch.", ""),
                                 path=path, line=line, neginf_input=any(has_neginf(t) for t in ins),
                                 neginf_origin=self.neginf_origin)
                raise FoundIt()
            if self.neginf_origin is None and any(has_neginf(t) for t in outs) \
                    and not any(has_neginf(t) for t in ins):
                path, line = _user_frame(self.stop_frame)
                self.neginf_origin = (pretty_op(str(func)), path, line)
            return out

    return FirstBadOp
