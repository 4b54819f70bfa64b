"""What an unrecorded step keeps of each outermost model call, so that it can be replayed if its gradients
turn out non-finite.

Per outermost call made with grad enabled on CPU tensors (at most ``MAX_CAPTURES`` per iteration): the
module, references to its args and kwargs (no copy), the version of every tensor among them (an
in-place change after the call is then seen), the CPU generator's state (5 KB, ~2 us) and the autocast
state; references to its floating outputs (the replay's must equal them bit for bit, or it claims
nothing), and, per output with a ``grad_fn``, a pre-hook on that node that keeps the gradient flowing
into the output (a pre-hook on the node: no hook dictionary is added to the script's tensor).
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
from torchpact.watch.watchers._nonfinite.values import AUTOCAST_OFF, autocast_at_call, floating_tensors

# Outermost calls kept per iteration; past that, none of the iteration's. A script whose steps all make more
# (an RL rollout calls its policy at every time step, a hand-unrolled RNN its cell) makes small calls, which
# keeping would slow by a tenth (~20 us each on a 2-core CPU, against ~200 us for a 26-module policy): after
# OVERFLOWS such iterations in a row none is kept any more. (A validation pass left with grad enabled makes
# one such iteration, and the next steps are kept again.)
MAX_CAPTURES = 16
OVERFLOWS = 3
MAX_OUTPUTS = 8           # output tensors hooked per call
# Outputs and their gradients held until the next iteration's first forward, as the recorder's activation
# gradients are: a language model's logits above it are not kept.
OUT_GRAD_BYTES = 64 << 20


class Capture:
    """One outermost model call of an unrecorded iteration."""

    __slots__ = ("args", "autocast", "dropped", "fired", "grads", "kwargs", "module", "out_versions", "outputs",
                 "positions", "rng", "task", "unkept", "versions", "waiting", "__weakref__")

    def __init__(self, module: Any, args: tuple, versions: list[Any], rng: Any,
                 autocast: tuple[str, bool, Any] | None) -> None:
        self.module = module
        self.args = args
        self.kwargs: dict | None = None
        self.versions = versions          # tensor, its version at the call, tensor, version, ... (args, then kwargs)
        self.rng = rng
        self.autocast = autocast
        self.positions: list[int] = []    # indices, in floating_tensors(output), of the outputs kept
        self.outputs: list[Any] = []      # those outputs
        self.out_versions: list[int] = []  # and their versions when the call returned
        self.grads: list[Any] = []        # their gradients, as they fire (None: not yet, or no grad_fn)
        self.waiting = 0                  # hooked outputs whose gradient has not fired yet
        self.unkept = 0                   # bytes of outputs not kept (over OUT_GRAD_BYTES)
        self.fired = -1                   # the iteration in which the last one fired
        self.task = -1                    # the autograd graph task it fired in
        self.dropped = 0                  # bytes of output gradients not kept (over OUT_GRAD_BYTES)

    def inputs(self) -> list[tuple[Any, int]]:
        """(tensor, version at the call) of every tensor among its args and kwargs."""
        v = self.versions
        return [(v[i], v[i + 1]) for i in range(0, len(v), 2)]


class OutputGrad:
    """The pre-hook on the autograd node of a captured call's output: keeps the gradient flowing into it.

    It refers to its capture weakly: the capture holds the output, whose autograd node holds this hook, and
    a strong reference would make a cycle that only the garbage collector frees (the step's graph would
    outlive the step)."""

    __slots__ = ("capture", "index", "nr", "owner")

    def __init__(self, owner: Captures, capture: Capture, index: int, nr: int) -> None:
        self.owner = owner
        self.capture = weakref.ref(capture)
        self.index = index
        self.nr = nr          # the output's position among its node's outputs

    def __call__(self, grads: tuple) -> None:
        capture, owner = self.capture(), self.owner
        grad = grads[self.nr]
        if capture is None or grad is None:  # the iteration it belonged to is over; a sibling output's gradient
            return
        if grad.requires_grad:  # a double backward's: do not keep its graph
            grad = grad.detach()
        capture.fired = owner.iteration
        capture.task = values.torch._C._current_graph_task_id()
        old = capture.grads[self.index]
        if old is not None:  # a second backward through the same output (retain_graph=True)
            capture.grads[self.index] = old + grad
            return
        capture.waiting -= 1
        size = grad.numel() * grad.element_size()
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
        self.off: str | None = None            # why calls are no longer kept (for good)
        self.overflow = False                  # this iteration made more than MAX_CAPTURES calls
        self._overflows = 0                    # iterations in a row that did
        self._state: Any = None                # the CPU generator's get_state

    def new_iteration(self) -> None:
        previous = [c for c in self.items if c.waiting > 0]
        self.held = 0
        for c in previous:  # what fired was read by the step it belonged to
            c.grads = [None] * len(c.grads)
            c.dropped = 0
            self.held += sum(t.numel() * t.element_size() for t in c.outputs)
        self.previous = previous
        self.items = []
        self.pending = None
        self.iteration += 1
        self._overflows = self._overflows + 1 if self.overflow else 0
        self.overflow = False
        if self._overflows >= OVERFLOWS:
            self.off = f"the script's steps make more than {MAX_CAPTURES} model calls, which torchpact does not keep"

    def clear(self) -> None:
        self.items, self.previous, self.pending = [], [], None

    # The two callbacks below run at every outermost call of an unrecorded step: few calls, few objects.
    def start(self, module: Any, args: tuple) -> None:
        """An outermost call begins (``on_forward_pre`` at depth 1)."""
        self.pending = None
        torch = values.torch
        if self.off is not None or not torch.is_grad_enabled():
            return  # (without grad it reaches no gradient)
        if self.overflow:
            return
        if len(self.items) >= MAX_CAPTURES:
            self.overflow = True
            self.clear()
            return
        versions: list[Any] = []
        if not _versions(args, versions):
            self.off = "the model's inputs are not on the CPU"
            return
        if torch._C._is_any_autocast_enabled():
            tensors = floating_tensors(args[0] if len(args) == 1 else args)
            autocast = autocast_at_call(tensors[0]) if tensors else None
        else:
            autocast = AUTOCAST_OFF
        state = self._state
        if state is None:
            state = self._state = torch.default_generator.get_state
        self.pending = Capture(module, args, versions, state(), autocast)

    def end(self, module: Any, kwargs: dict | None, output: Any) -> None:
        """The outermost call returned (``on_forward`` at depth 0; ``output`` None when it raised)."""
        capture, self.pending = self.pending, None
        if capture is None or capture.module is not module or output is None:
            return
        if kwargs and not _versions(kwargs, capture.versions):
            self.off = "the model's inputs are not on the CPU"
            return
        capture.kwargs = kwargs  # None: torch did not pass them
        for i, t in enumerate(floating_tensors(output)[:MAX_OUTPUTS]):
            size = t.numel() * t.element_size()
            if self.held + size > OUT_GRAD_BYTES:
                capture.unkept += size
                continue
            self.held += size
            node = t.grad_fn
            if node is not None:  # never a hook on a leaf: it would stay on it for good
                node.register_prehook(OutputGrad(self, capture, len(capture.positions), t.output_nr))
                capture.waiting += 1
            capture.positions.append(i)
            capture.outputs.append(t)
            capture.out_versions.append(values.version(t))
            capture.grads.append(None)
        self.items.append(capture)

    @staticmethod
    def too_many() -> str:
        return f"it made more than {MAX_CAPTURES} model calls, which torchpact does not keep"

    def of_step(self) -> list[Capture]:
        """The calls to replay for this step, in call order: this iteration's, and the previous iteration's
        whose outputs received gradients in this one."""
        return [c for c in self.previous if c.fired == self.iteration] + self.items


def _versions(value: Any, out: list[Any], depth: int = 0) -> bool:
    """Append each tensor in ``value`` (args, kwargs, nested up to two levels) and its version to ``out``;
    False when one is not on the CPU."""
    torch = values.torch
    if isinstance(value, torch.Tensor):
        if not value.is_cpu:
            return False
        out.append(value)
        out.append(values.version(value))
        return True
    if depth > 2:
        return True
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else ()
    for v in items:
        if not _versions(v, out, depth + 1):
            return False
    return True
