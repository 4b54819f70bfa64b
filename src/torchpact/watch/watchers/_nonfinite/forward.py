"""Forward: which module of a recorded forward first turned its output bad.

Only when the model's output is bad (a NaN that a later module masks on purpose, e.g. imputed missing
values, is fine) are the other tensors reduced, read with one ``tolist()`` per device and dtype, and a
culprit looked for: the first module, in completion order, with a bad output and no bad input. A
tensor changed in place since it was seen is unknown and makes no module the culprit, which falls to
the enclosing module.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from torchpact.watch.watchers._nonfinite import values
from torchpact.watch.watchers._nonfinite.recorder import Call, Entry, settle


class Verdict(NamedTuple):
    """``kind``: "module" (``call``'s output is bad, its inputs were finite) or "input" (the model's own
    input ``call.ins`` already held NaN/inf)."""

    kind: str
    call: Call


def output_bad(calls: list[Call], entries: list[Entry]) -> bool:
    """Whether the outermost call (the last to complete) returned NaN/+inf; its outputs are read here."""
    outermost = calls[-1] if calls else None
    if outermost is None or outermost.parent is not None:
        return False
    settle([entries[i] for i in outermost.outs])
    return any(entries[i].bad for i in outermost.outs)


def culprit(calls: list[Call], entries: list[Entry]) -> Verdict | None:
    """The first call, in completion order, with a bad output and no bad (or unknown) input; else the model
    call whose own input was bad; None when neither (every entry must be settled)."""
    outermost = calls[-1] if calls else None
    if outermost is None or outermost.parent is not None or not any(entries[i].bad for i in outermost.outs):
        return None  # no NaN/inf left the model: a module that makes one and a later one that masks it is fine
    for call in calls:
        if any(entries[i].bad for i in call.outs) and all(
                entries[i].total is not None and not entries[i].bad for i in call.ins):
            return Verdict("module", call)  # (an input changed in place since it was seen is unknown: not this one)
    roots = [c for c in calls if c.parent is None]
    bad_input = next((c for c in roots if any(entries[i].bad for i in c.ins)), None)
    return Verdict("input", bad_input) if bad_input is not None else None


def confirmed(call: Call, entries: list[Entry]) -> bool:
    """A bad sum may be a float32 overflow of finite values: check the output itself while it is unchanged."""
    torch = values.torch
    for i in call.outs:
        entry = entries[i]
        if not entry.bad:
            continue
        t = entry.tensor
        if t is None or values.version(t) != entry.version:
            return True  # changed in place since: trust the sum
        with torch.no_grad():
            if bool((torch.isnan(t) | torch.isposinf(t)).any()):
                return True
    return False


def nonfinite_params(module: Any, names: Any) -> list[str]:
    """Full names of the module's parameters and buffers that hold NaN/inf."""
    torch = values.torch
    prefix = names.module(module)
    out = []
    with torch.no_grad():
        for pname, t in list(module.named_parameters()) + list(module.named_buffers()):
            if t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()):
                out.append(names.param(t) if names.has_param(t) else f"{prefix}.{pname}")
    return out
