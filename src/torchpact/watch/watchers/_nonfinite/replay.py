"""Replaying an unrecorded step whose gradients turned out non-finite, before the optimizer applies them.

Each captured model call (``capture.py``) runs again, in call order, on private copies of its modules:
parameters as new leaves sharing the parameters' storage (nothing is written to them, their ``.grad``
is never touched), buffers cloned (BatchNorm's running statistics and ``num_batches_tracked`` of the
script's modules stay as they are), lists, dicts and sets among the modules' attributes copied (a
forward that appends to one appends to the copy's), inputs cloned, the CPU generator set to its state
at the call (dropout draws the same masks) and restored afterwards (Python's and NumPy's global generators
too), autocast as at the call, torchpact's wrappers of torch functions passing through. The copies'
calls bypass every module hook and go through the recorder instead, so the replay is a recorded step:
the forward analysis and the op search run on it as on a sampled step. Then the backward runs from the
gradients the outputs received (``torch.autograd.backward(..., inputs=<the copies' leaves>)``: nothing
outside the copies accumulates anything), the calls whose outputs were differentiated in one
``backward()`` together, with tensor hooks on every activation as on a sampled step.

A replay is only as faithful as the step is reproducible. It is not attempted when an input was changed
in place after the call (its version moved), when the keyword arguments were not seen, on devices
other than the CPU, for sharded (FSDP) or TorchScript models, or once a step has made more than
``capture.MAX_CAPTURES`` model calls (none is kept from then on). When it runs, its outputs and the
gradients it accumulates in the copies' leaves are compared with the step's: outputs that differ mean it
did not reproduce the step, and it then names nothing.
The module hooks of the script are not run (they may have effects), and a forward that reads state
changed since (a counter, another generator, ``random``) or non-deterministic kernels may make it
differ: the comparison says so. A model compiled with ``torch.compile`` is replayed eagerly, a
``DistributedDataParallel`` one without its wrapper (on one rank: a NaN from another rank's data is
not reproduced).
"""

from __future__ import annotations

import contextlib
import types
from typing import Any, Callable

from torchpact.watch.watchers import _patch
from torchpact.watch.watchers._nonfinite import values
from torchpact.watch.watchers._nonfinite.capture import OUT_GRAD_BYTES, Capture
from torchpact.watch.watchers._nonfinite.recorder import Recorder
from torchpact.watch.watchers._nonfinite.values import AUTOCAST_OFF, floating_tensors
from torchpact.watch.watchers._probe import host_generators_kept

MAX_REPLAYS = 3           # per run: after a NaN the following steps are recorded anyway

_TORCH_DICTS = frozenset({"_parameters", "_buffers", "_modules"})


class Unreplayable(Exception):
    """Why a step cannot be replayed faithfully (the message, in words)."""


class Replay:
    """One replay of a step's captured calls. ``run`` calls ``on_forward(recorder)`` after each call's
    forward (True stops the replay: the origin was found there) and returns whether it ran to the end."""

    def __init__(self, captures: list[Capture], names: Any, hold_bytes: int) -> None:
        self.captures = captures
        self.names = names
        self.recorder = Recorder(hold_bytes)
        self.recording = False
        self.leaves: dict[int, tuple[Any, Any]] = {}   # id(parameter) -> (parameter, its leaf in the copies)
        self.caveats: list[str] = []
        self.distributed = False                        # a DistributedDataParallel model: this rank's calls only
        self.unreplayed_backward: list[str] = []       # why some call's backward did not run
        self.outputs_compared = 0
        self.mismatched: list[str] = []                 # calls whose replayed outputs differ from the step's
        self._copies: dict[int, Any] = {}
        self._input_leaves: list[Any] = []             # inputs that required grad, as new leaves

    # -------------------------------------------------------------------------------- checks
    def check(self) -> None:
        """Raise ``Unreplayable`` when the step cannot be replayed faithfully."""
        for capture in self.captures:
            name = self.names.module(capture.module)
            if capture.kwargs is None:
                raise Unreplayable(f"torch did not pass the keyword arguments of `{name}`'s call")
            for t, seen in capture.inputs():
                now = values.version(t)
                if now != seen:
                    raise Unreplayable(f"the {_which_input(capture, t)} of `{name}`'s call was modified in place "
                                       f"after the call (its version went from {seen} to {now})")
            root = _replayed(capture.module)
            for module in root.modules():
                kind = type(module).__name__
                if "FullyShardedDataParallel" in kind or "FSDP" in kind:
                    raise Unreplayable(f"`{name}` is sharded ({kind})")
                if isinstance(module, values.torch.jit.ScriptModule):
                    raise Unreplayable(f"`{name}` holds a TorchScript module")
            for p in list(root.parameters()) + list(root.buffers()):
                if not p.is_cpu or hasattr(p, "to_local"):
                    raise Unreplayable(f"`{name}` has parameters on {p.device} or sharded")
            if type(capture.module).__name__ == "DistributedDataParallel":
                self.distributed = True
            elif root is not capture.module:
                self._caveat(f"`{name}` was replayed eagerly (it is compiled)")
            hooked = _hooked_modules(root, self.names)
            if hooked:
                self._caveat("the module hooks of " + ", ".join(f"`{n}`" for n in hooked[:3])
                             + (" and others" if len(hooked) > 3 else "") + " were not run in the replay")
            if capture.dropped:
                self.unreplayed_backward.append(
                    f"the gradient of `{name}`'s output ({capture.dropped / 2 ** 20:.0f} MB) was over the "
                    f"{OUT_GRAD_BYTES >> 20} MB torchpact keeps")

    def _caveat(self, text: str) -> None:
        if text not in self.caveats:
            self.caveats.append(text)

    # -------------------------------------------------------------------------------- run
    def run(self, on_forward: Callable[[Recorder], bool]) -> bool:
        torch = values.torch
        captures = self.captures
        last_of_task: dict[int, int] = {}
        for i, c in enumerate(captures):
            if _differentiated(c):
                last_of_task[c.task] = i
        pending: dict[int, list[tuple[Any, Any]]] = {}
        state = torch.get_rng_state()
        try:
            with torch.enable_grad(), host_generators_kept(), _patch.suspended():
                for i, capture in enumerate(captures):
                    root = self._copy(_replayed(capture.module))
                    args = _clone_inputs(capture.args, self._input_leaves)
                    kwargs = _clone_inputs(capture.kwargs, self._input_leaves)
                    torch.set_rng_state(capture.rng)
                    self.recording = True
                    try:
                        with _autocast(capture.autocast):
                            output = root(*args, **kwargs)
                    finally:
                        self.recording = False
                    self._compare(capture, floating_tensors(output))
                    recorder = self.recorder
                    try:
                        if recorder.entries and on_forward(recorder):
                            return False
                        recorder.link_backward()
                    finally:
                        recorder.end_forward()
                    if _differentiated(capture):
                        outs = floating_tensors(output)
                        pairs = pending.setdefault(capture.task, [])
                        for position, grad in zip(capture.positions, capture.grads, strict=True):
                            if grad is not None and position < len(outs) and outs[position].requires_grad:
                                pairs.append((outs[position], grad))
                        if last_of_task[capture.task] == i:
                            self._backward(pending.pop(capture.task))
        finally:
            torch.set_rng_state(state)
        return True

    def _compare(self, capture: Capture, outs: list[Any]) -> None:
        """Whether the replay's outputs are the step's, bit for bit (NaN equal to NaN): if not, it did not
        reproduce the step and shows nothing about it."""
        for position, real, seen in zip(capture.positions, capture.outputs, capture.out_versions, strict=True):
            if values.version(real) != seen:
                continue  # changed in place since the call: no longer what it returned
            self.outputs_compared += 1
            if position >= len(outs) or not _same(outs[position], real):
                name = self.names.module(capture.module)
                if name not in self.mismatched:
                    self.mismatched.append(name)

    def _backward(self, pairs: list[tuple[Any, Any]]) -> None:
        leaves = [leaf for _, leaf in self.leaves.values() if leaf.requires_grad] + self._input_leaves
        if not pairs or not leaves:
            return
        outs, grads = zip(*pairs, strict=True)
        values.torch.autograd.backward(list(outs), list(grads), inputs=leaves)

    # -------------------------------------------------------------------------------- results
    def bad_parameters(self) -> list[Any]:
        """The script's parameters whose gradient in the replay is non-finite."""
        torch = values.torch
        return [p for p, leaf in self.leaves.values()
                if leaf.grad is not None and not bool(torch.isfinite(leaf.grad).all())]

    def compare(self, params: list[Any]) -> tuple[int, list[Any]]:
        """How many of the gradients the step is about to apply to ``params`` were compared with the replay's,
        and the parameters whose gradient differs (NaN equal to NaN)."""
        compared, out = 0, []
        for p in params:
            got = self.leaves.get(id(p))
            if got is None or got[0] is not p:
                continue
            a, b = p.grad, got[1].grad
            if a is None or b is None or a.is_sparse:
                continue
            compared += 1
            if not _same(a, b):
                out.append(p)
        return compared, out

    # -------------------------------------------------------------------------------- copies
    def _copy(self, module: Any) -> Any:
        """A private copy of ``module`` and its submodules whose calls go to the recorder (see the module doc)."""
        got = self._copies.get(id(module))
        if got is not None:
            return got
        new = type(module).__new__(type(module))
        self._copies[id(module)] = new
        state = {}
        for key, value in vars(module).items():
            if key in _TORCH_DICTS:
                continue
            if type(value) in (list, dict, set):
                value = type(value)(value)
            elif isinstance(value, types.MethodType) and isinstance(value.__self__, values.torch.nn.Module):
                value = types.MethodType(value.__func__, self._copy(value.__self__))  # never the script's module
            elif key == "forward":  # replaced on the instance by a function that may call the script's modules
                raise Unreplayable(f"`{self.names.module(module)}.forward` is replaced on the instance")
            state[key] = value
        new.__dict__.update(state)
        new._parameters = {k: None if p is None else self._leaf(p) for k, p in module._parameters.items()}
        new._buffers = {k: None if b is None else b.detach().clone() for k, b in module._buffers.items()}
        new._modules = {k: None if m is None else self._copy(m) for k, m in module._modules.items()}
        # Module.__call__ goes straight to _compiled_call_impl when set: no global or module hook runs.
        new.__dict__["_compiled_call_impl"] = self._call_of(module, new.forward)
        return new

    def _leaf(self, p: Any) -> Any:
        got = self.leaves.get(id(p))
        if got is None:  # one leaf per parameter, also where modules share it (tied weights)
            leaf = p.detach()
            if p.requires_grad:
                leaf.requires_grad_(True)
            got = self.leaves[id(p)] = (p, leaf)
        return got[1]

    def _call_of(self, original: Any, forward: Callable) -> Callable:
        recorder = self.recorder

        def call(*args: Any, **kwargs: Any) -> Any:
            if not self.recording:  # a recomputation in backward (activation checkpointing)
                return forward(*args, **kwargs)
            recorder.enter(original, args, kwargs, values.torch.get_rng_state())
            try:
                output = forward(*args, **kwargs)
            except BaseException:
                recorder.leave(original, None)
                raise
            recorder.leave(original, output)
            return output

        return call


def _same(a: Any, b: Any) -> bool:
    torch = values.torch
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    with torch.no_grad():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def _replayed(module: Any) -> Any:
    """The module whose forward a replay runs: a compiled or DDP-wrapped model's own module."""
    inner = getattr(module, "_orig_mod", None)  # torch.compile's OptimizedModule
    if inner is not None and type(module).__name__ == "OptimizedModule":
        return inner
    if type(module).__name__ == "DistributedDataParallel":
        return module.module
    return module


def _hooked_modules(root: Any, names: Any) -> list[str]:
    """Names of the modules with forward or backward hooks of their own (the replay does not run them)."""
    out = []
    for module in root.modules():
        if module._forward_hooks or module._forward_pre_hooks or module._backward_hooks \
                or module._backward_pre_hooks:
            out.append(names.module(module))
    return out


def _differentiated(capture: Capture) -> bool:
    return capture.fired >= 0 and capture.task >= 0 and any(g is not None for g in capture.grads)


def _which_input(capture: Capture, t: Any) -> str:
    """Words for the tensor ``t`` among a call's inputs."""
    for i, a in enumerate(capture.args):
        if a is t:
            return f"{_ordinal(i + 1)} argument"
    for key, v in (capture.kwargs or {}).items():
        if v is t:
            return f"argument `{key}`"
    return "input"


def _ordinal(n: int) -> str:
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")


def _clone_inputs(value: Any, leaves: list[Any]) -> Any:
    """Inputs for the replay: tensors cloned (a forward that writes into its input writes into the clone), a
    floating tensor that required grad as a new leaf that does, added to ``leaves`` (its gradient is then
    computed, as the step computed it for the tensor the input was)."""
    from torch.utils._pytree import tree_map

    torch = values.torch

    def clone(a: Any) -> Any:
        if not isinstance(a, torch.Tensor):
            return a
        c = a.detach().clone()
        if a.requires_grad and c.is_floating_point():
            c.requires_grad_(True)
            leaves.append(c)
        return c

    return tree_map(clone, value)


def _autocast(state: tuple[str, bool, Any] | None) -> Any:
    torch = values.torch
    if state is None:
        return contextlib.nullcontext()
    if state is AUTOCAST_OFF:
        return torch.autocast("cpu", enabled=False)
    device, enabled, dtype = state
    return torch.autocast(device, dtype=dtype, enabled=enabled)
