"""Ground truth for the edge targets, computed with plain torch and nothing of torchpact's.

Each model in ``edge_targets.py`` documents the sizes it takes (``RANGES``). The sizes tried here
come from those ranges only: both ends, the sizes next to them, and nine evenly spaced sizes
between, one dim at a time, the other dims at the example's. Each path is built by hand the way a
user builds it on the example (``torch.jit.trace``; ``torch.export.export`` with ``Dim.AUTO`` on
every ranged dim; ``torch.onnx.export`` of the same program run in onnxruntime) and run on every
size eager accepts. A path is ``ok`` when it matches eager on all of them, ``broken`` when it
raises or differs on one, ``failed`` when it cannot be built.

The batch axis is found the same way, without names: the dim along which running one slice gives
that slice of the whole output (the last slice, so that a recurrence over time does not pass).
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch
from torch.export import Dim
from torch.utils import _pytree

from tests.audit import edge_targets as E

PATHS = ("trace", "export", "onnx")


def sizes(lo: int, hi: int) -> list[int]:
    """Both ends, their neighbours, and nine evenly spaced sizes in between."""
    spaced = {round(lo + (hi - lo) * k / 8) for k in range(9)}
    return sorted(s for s in spaced | {lo, lo + 1, hi - 1, hi} if lo <= s <= hi)


def resized(x: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """``x`` with ``size`` entries along ``dim``: the example's repeated, then cut."""
    reps = math.ceil(size / x.shape[dim])
    return torch.cat([x] * reps, dim).narrow(dim, 0, size).contiguous()


def target(func: str) -> tuple[Any, tuple]:
    return getattr(E, func)()


def cases(func: str) -> list[tuple[str, tuple]]:
    """``(label, args)`` per size of each documented dim."""
    model, args = target(func)
    params = list(inspect.signature(model.forward).parameters)
    out = []
    for name, dims in E.RANGES[func].items():
        i = params.index(name)
        for dim, (what, lo, hi) in dims.items():
            for size in sizes(lo, hi):
                if size == args[i].shape[dim]:
                    continue
                new = list(args)
                new[i] = resized(args[i], dim, size)
                out.append((f"{what}={size}", tuple(new)))
    return out


def _dynamic(func: str, model: Any, args: tuple) -> tuple:
    params = list(inspect.signature(model.forward).parameters)
    table = E.RANGES[func]
    return tuple({d: Dim.AUTO for d in table.get(params[i], {})} or None for i in range(len(args)))


def _same(ref: Any, out: Any) -> bool:
    ref_t = [t for t in _pytree.tree_leaves(ref) if isinstance(t, torch.Tensor)]
    out_t = [torch.as_tensor(t) for t in _pytree.tree_leaves(out)]
    if len(ref_t) != len(out_t):
        return False
    for r, o in zip(ref_t, out_t, strict=True):
        if r.shape != o.shape:
            return False
        if r.numel() and (r.double() - o.double()).abs().max() > 1e-5 + 1e-4 * r.double().abs().max():
            return False
    return True


def build(func: str, path: str) -> Any:
    """The artifact a user would build on the example, as a callable on the positional inputs."""
    model, args = target(func)
    if path == "trace":
        return torch.jit.trace(model, args, check_trace=False)
    dynamic = _dynamic(func, model, args)
    if path == "export":
        return torch.export.export(model, args, dynamic_shapes=dynamic).module()
    import onnxruntime as ort

    program = torch.onnx.export(model, args, dynamic_shapes=dynamic, verbose=False)
    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(program.model_proto.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    run_options = ort.RunOptions()
    run_options.log_severity_level = 4

    def run(*tensors: torch.Tensor) -> list[torch.Tensor]:
        feed = {n: t.numpy() for n, t in zip(names, tensors, strict=False)}
        return [torch.from_numpy(a) for a in session.run(None, feed, run_options)]

    return run


def truth(func: str, path: str) -> dict[str, Any]:
    """``{"verdict": ok / broken / failed, "sizes": {label: ok / mismatch / error}}`` over the sizes
    eager accepts (``eager_rejects`` lists the others)."""
    model, _ = target(func)
    try:
        artifact = build(func, path)
    except Exception as exc:
        return {"verdict": "failed", "sizes": {}, "eager_rejects": [], "error": str(exc).splitlines()[0][:200]}
    out: dict[str, str] = {}
    rejects = []
    with torch.no_grad():
        for label, args in cases(func):
            try:
                ref = model(*args)
            except Exception:
                rejects.append(label)
                continue
            try:
                got = artifact(*args)
            except Exception:
                out[label] = "error"
                continue
            out[label] = "ok" if _same(ref, got) else "mismatch"
    verdict = "ok" if set(out.values()) <= {"ok"} else "broken"
    return {"verdict": verdict, "sizes": out, "eager_rejects": rejects}


def batch_axes(func: str) -> list[int]:
    """The dims of the first input along which the model treats entries independently."""
    model, args = target(func)
    x = args[0]
    found = []
    with torch.no_grad():
        whole = model(*args)
        for d in range(x.dim()):
            if x.shape[d] < 2:
                continue
            last = x.shape[d] - 1
            try:
                part = model(x.narrow(d, last, 1), *args[1:])
            except Exception:  # not an axis the model takes one entry of (channels)
                continue
            if whole.dim() > d and whole.shape[d] == x.shape[d] and _same(whole.narrow(d, last, 1), part):
                found.append(d)
    return found
