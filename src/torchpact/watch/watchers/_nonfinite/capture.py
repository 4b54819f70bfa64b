"""What an unrecorded step keeps of each outermost model call, so that it can be replayed if its gradients
turn out non-finite.

Per outermost call made with grad enabled on CPU tensors (at most ``MAX_CAPTURES`` per iteration): the
module, references to its args and kwargs (no copy), the version of every tensor among them (an
in-place change after the call is then seen), the CPU generator's state (5 KB, ~2 us) and the autocast
state; references to its floating outputs (the replay's must equal them bit for bit, or it claims
nothing), and one tensor hook per output with a ``grad_fn`` that keeps the gradient flowing into it.
Outputs and gradients are held until the next iteration's first forward, ``OUT_GRAD_BYTES`` in all per
iteration; past that, none (the replay then says so). Taken together a few microseconds per model call.
The hook notes the iteration and the autograd graph task it fired in: the calls whose outputs received
gradients in one ``backward()`` are replayed in one backward.

A model's output may receive its gradient only after another optimizer stepped (a GAN's generator
output, detached for the discriminator's step, differentiated for the generator's): the calls of the
previous iteration whose outputs had not received all their gradients are kept one iteration longer.
"""

from __future__ import annotations

import weakref
from typing import Any

from torchpact.watch.watchers._nonfinite import values
from torchpact.watch.watchers._nonfinite.values import autocast_at_call, floating_tensors

MAX_CAPTURES = 64         # outermost calls kept per iteration (an RL rollout makes one per time step)
MAX_OUTPUTS = 8           # output tensors hooked per call
# Outputs and their gradients held until the next iteration's first forward, as the recorder's activation
# gradients are: a language model's logits above it are not kept.
OUT_GRAD_BYTES = 64 << 20


class Capture:
    """One outermost model call of an unrecorded iteration."""

    __slots__ = ("args", "autocast", "dropped", "fired", "grads", "hooked", "kwargs", "module", "outputs", "positions",
                 "rng", "task", "unkept", "versions", "out_versions", "__weakref__")

    def __init__(self, module: Any, args: tuple, versions: list[tuple[Any, int]], rng: Any,
                 autocast: tuple[str, bool, Any] | None) -> None:
        self.module = module
        self.args = args
        self.kwargs: dict | None = None
        self.versions = versions          # (tensor, version at the call) for every tensor in args and kwargs
        self.rng = rng
        self.autocast = autocast
        self.positions: list[int] = []    # indices, in floating_tensors(output), of the outputs kept
        self.outputs: list[Any] = []      # those outputs
        self.out_versions: list[int] = []  # and their versions when the call returned
        self.hooked: list[bool] = []      # whether each has a grad_fn, and so a hook keeping its gradient
        self.grads: list[Any] = []        # their gradients, as they fire (None: not yet)
        self.unkept = 0                   # bytes of outputs not kept (over OUT_GRAD_BYTES)
        self.fired = -1                   # the iteration in which the last one fired
        self.task = -1                    # the autograd graph task it fired in
        self.dropped = 0                  # bytes of output gradients not kept (over OUT_GRAD_BYTES)

    def waiting(self) -> bool:
        """Whether some hooked output has not received its gradient yet."""
        return any(h and g is None for h, g in zip(self.hooked, self.grads, strict=True))


class OutputGrad:
    """The tensor hook on a captured call's output: keeps the gradient flowing into it.

    It refers to its capture weakly: the capture holds the output, whose autograd node holds this hook, and
    a strong reference would make a cycle that only the garbage collector frees (the step's graph would
    outlive the step)."""

    __slots__ = ("capture", "index", "owner")

    def __init__(self, owner: Captures, capture: Capture, index: int) -> None:
        self.owner = owner
        self.capture = weakref.ref(capture)
        self.index = index

    def __call__(self, grad: Any) -> None:
        capture, owner = self.capture(), self.owner
        if capture is None:  # the iteration it belonged to is over
            return
        if grad.requires_grad:  # a double backward's: do not keep its graph
            grad = grad.detach()
        capture.fired = owner.iteration
        capture.task = values.torch._C._current_graph_task_id()
        old = capture.grads[self.index]
        if old is not None:  # a second backward through the same output (retain_graph=True)
            capture.grads[self.index] = old + grad
            return
        size = _nbytes(grad)
        if owner.held + size > OUT_GRAD_BYTES:
            capture.dropped += size
            return
        owner.held += size
        capture.grads[self.index] = grad


class Captures:
    """The outermost calls of the current iteration (and the previous one's still waiting for gradients)."""

    def __init__(self) -> None:
        self.items: list[Capture] = []
        self.previous: list[Capture] = []
        self.pending: Capture | None = None   # between a call's start and its end
        self.iteration = 0
        self.held = 0
        self.overflow = 0                      # calls past MAX_CAPTURES this iteration
        self.device: str | None = None         # a device other than the CPU seen in a call's inputs

    def new_iteration(self) -> None:
        previous = [c for c in self.items if c.waiting()]
        self.held = 0
        for c in previous:  # what fired was read by the step it belonged to
            c.grads = [None] * len(c.grads)
            c.dropped = 0
            self.held += sum(_nbytes(t) for t in c.outputs)
        self.previous = previous
        self.items = []
        self.pending = None
        self.iteration += 1
        self.overflow = 0
        self.device = None

    def clear(self) -> None:
        self.items, self.previous, self.pending = [], [], None

    def start(self, module: Any, args: tuple) -> None:
        """An outermost call begins (``on_forward_pre`` at depth 1)."""
        torch = values.torch
        self.pending = None
        if not torch.is_grad_enabled():
            return  # it reaches no gradient
        if len(self.items) >= MAX_CAPTURES:
            self.overflow += 1
            return
        versions = _versions(args, [])
        if versions is None:
            self.device = self.device or "a device other than the CPU"
            return
        tensors = floating_tensors(args[0] if len(args) == 1 else args)
        self.pending = Capture(module, args, versions, torch.get_rng_state(),
                               autocast_at_call(tensors[0]) if tensors else None)

    def end(self, module: Any, kwargs: dict | None, output: Any) -> None:
        """The outermost call returned (``on_forward`` at depth 0; ``output`` None when it raised)."""
        capture, self.pending = self.pending, None
        if capture is None or capture.module is not module or output is None:
            return
        if kwargs:
            if _versions(kwargs, capture.versions) is None:
                self.device = self.device or "a device other than the CPU"
                return
            capture.kwargs = kwargs
        else:
            capture.kwargs = {} if kwargs is not None else None
        for i, t in enumerate(floating_tensors(output)[:MAX_OUTPUTS]):
            size = _nbytes(t)
            if self.held + size > OUT_GRAD_BYTES:
                capture.unkept += size
                continue
            self.held += size
            hooked = t.grad_fn is not None  # never a hook on a leaf: it would stay on it for good
            if hooked:
                t.register_hook(OutputGrad(self, capture, len(capture.positions)))
            capture.positions.append(i)
            capture.outputs.append(t)
            capture.out_versions.append(values.version(t))
            capture.hooked.append(hooked)
            capture.grads.append(None)
        self.items.append(capture)

    def of_step(self) -> list[Capture]:
        """The calls to replay for this step, in call order: this iteration's, and the previous iteration's
        whose outputs received gradients in this one."""
        return [c for c in self.previous if c.fired == self.iteration] + self.items


def _nbytes(t: Any) -> int:
    return t.numel() * t.element_size()


def _versions(value: Any, out: list[tuple[Any, int]], depth: int = 0) -> list[tuple[Any, int]] | None:
    """(tensor, version) of each tensor in ``value`` (args, kwargs, nested up to two levels), appended to
    ``out``; None when one is not on the CPU."""
    torch = values.torch
    if isinstance(value, torch.Tensor):
        if not value.is_cpu:
            return None
        out.append((value, values.version(value)))
        return out
    if depth > 2:
        return out
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else ()
    for v in items:
        if _versions(v, out, depth + 1) is None:
            return None
    return out
