"""Recording a forward: every floating tensor that enters or leaves a module, with its version.

With grad enabled the tensors are held until the outermost call returns (autograd keeps most of them
alive anyway, and the op search needs the inputs), so their reduction waits for a bad output and most
forwards never pay it. A tensor changed in place since it was seen (``out += identity``) is then
unknown. The inputs of a module that overwrites them (``nn.ReLU(inplace=True)`` and the other
``inplace`` modules) are reduced before it runs. Under no_grad each tensor is reduced when seen (one
kernel, no host sync) and only a weak reference is kept. Non-leaf tensors get a tensor hook that keeps
their gradient for the backward analysis (``backward.py``).
"""

from __future__ import annotations

import itertools
import math
import weakref
from typing import Any

from torchpact.watch.watchers._nonfinite import values
from torchpact.watch.watchers._nonfinite.backward import BwTable, GradHook
from torchpact.watch.watchers._nonfinite.values import autocast_at_call, floating_tensors, read, reduce, reducible

MAX_ENTRIES = 20_000      # tensors tracked per outermost forward / per step in backward


class Entry:
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
        self.reduced = reduced          # 0-d sum taken when seen; None while deferred (see settle)
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


def reduce_now(entries: list[Entry]) -> None:
    """Reduce the held tensors not reduced yet that are still at the version seen (before an in-place
    module overwrites them, or when the model's output is bad); a changed one stays unreduced."""
    for e in entries:
        if e.reduced is None and not e.settled:
            t = e.tensor
            if t is not None and values.version(t) == e.version:
                e.reduced = reduce(t)


def settle(entries: list[Entry]) -> None:
    """Give each entry its total: the sum taken when it was seen, or, for a held tensor, its sum now if it
    is still at the version seen. A tensor changed in place since then stays unknown (``total`` None)."""
    fresh = [e for e in entries if not e.settled]
    reduce_now(fresh)
    for e in fresh:
        e.settled = True
    known = [e for e in fresh if e.reduced is not None]
    for e, v in zip(known, read([e.reduced for e in known]) if known else (), strict=True):
        e.total = v


class Call:
    """One module call during a recorded forward (``ins`` / ``outs``: indices of its tensors' entries)."""

    __slots__ = ("args", "autocast", "ins", "kwargs", "module", "outs", "parent", "rng", "root")

    def __init__(self, module: Any, parent: Call | None, args: tuple | None,
                 autocast: tuple[str, bool, Any] | None) -> None:
        self.module = module
        self.parent = parent
        self.root = parent.root if parent is not None else module
        self.args = args
        self.kwargs: dict | None = None   # known in a replay only (torch's global hooks do not pass them)
        self.rng: Any = None              # the CPU generator's state at the call, in a replay only
        self.autocast = autocast
        self.ins: list[int] | tuple = ()
        self.outs: list[int] | tuple = ()


class Recorder:
    """The module calls and tensors of the outermost forward being recorded, and the backward tables.

    The backward side is kept from the first forward after a step until the next one. A backward may run
    through a graph built before the last step (a GAN's generator output is reused after the
    discriminator stepped): the previous table is kept one iteration longer.
    """

    def __init__(self, hold_bytes: int) -> None:
        self.hold_bytes = hold_bytes  # activation gradients held unreduced between two steps; past it, reduced
        self.stack: list[Call] = []
        self.calls: list[Call] = []          # completion order
        self.entries: list[Entry] = []
        self.by_id: dict[int, int] = {}      # id(tensor) -> entry index, this outermost forward
        self.bw = BwTable()
        self.bw_prev: BwTable | None = None
        self.fire_order = itertools.count()
        self.held = 0                        # bytes of activation gradients held unreduced

    def new_iteration(self) -> None:
        """The first forward after a step: the backward of the last iteration is over."""
        bw = self.bw
        if bw.size or bw.calls or bw.fired:
            self.bw_prev, self.bw = bw, BwTable()
            # What fired before the step was read there if it was non-finite; a backward through the old
            # graph fires into it again from here.
            bw.forget_fired()
        else:  # nothing was recorded (the usual unsampled step): nothing to keep, nothing to allocate
            self.bw_prev = None
        self.held = 0

    def tables(self) -> list[BwTable]:
        return [t for t in (self.bw_prev, self.bw) if t is not None]

    # Every module call of a recorded step comes here: few allocations (each one counts towards the
    # garbage collector's next pass) and no call that can be saved.
    def enter(self, module: Any, args: tuple, kwargs: dict | None = None, rng: Any = None) -> None:
        stack = self.stack
        grad_mode = values.torch.is_grad_enabled()
        call = Call(module, stack[-1] if stack else None, args if grad_mode else None, None)
        if kwargs and grad_mode:
            call.kwargs = kwargs
        call.rng = rng
        tensors = floating_tensors(args[0] if len(args) == 1 else args)
        if tensors:
            call.autocast = autocast_at_call(tensors[0])
            ins = []
            for t in tensors:
                i = self.entry(t, grad_mode)
                if i >= 0:
                    ins.append(i)
            call.ins = ins
            if ins and vars(module).get("inplace") is True:  # nn.ReLU(inplace=True) & co. overwrite their input:
                reduce_now([self.entries[i] for i in ins])   # take its values before they go
        stack.append(call)

    def leave(self, module: Any, output: Any) -> bool:
        """``module``'s call returned (``output`` None when it raised); True when it was the outermost one."""
        if not self.stack:
            return False
        call = self.stack[-1]
        if call.module is not module:  # a call recorded before sampling switched; unwind to it
            if not any(c.module is module for c in self.stack):
                return False
            while self.stack and self.stack[-1].module is not module:
                self.stack.pop()
            call = self.stack[-1]
        self.stack.pop()
        if output is not None:
            grad_mode = values.torch.is_grad_enabled()
            outs = []
            for t in floating_tensors(output):
                i = self.entry(t, grad_mode)
                if i >= 0:
                    outs.append(i)
            call.outs = outs
            self.calls.append(call)
        return not self.stack

    def entry(self, t: Any, grad_mode: bool) -> int:
        """Index of ``t``'s entry, made on first sight (or after an in-place change)."""
        key = id(t)
        try:
            version = t._version
        except RuntimeError:  # an inference tensor (see values.version)
            version = -1
        entries = self.entries
        index = self.by_id.get(key)
        if index is not None:
            entry = entries[index]
            if entry.version == version and entry.tensor is t:
                return index
        if len(entries) >= MAX_ENTRIES:
            return -1
        if grad_mode:  # held anyway: reduced only if the model's output is bad (most forwards: never)
            if not reducible(t):
                return -1
            reduced = None
        else:
            reduced = reduce(t)
            if reduced is None:
                return -1
        entry = Entry(t, version, reduced, grad_mode)
        table = self.bw
        if grad_mode and table.open and t.grad_fn is not None:
            entry.bw = table.size
            table.size += 1
            t.register_hook(GradHook(self, table, entry.bw))
        index = len(entries)
        entries.append(entry)
        self.by_id[key] = index
        return index

    def version_at_call(self, call: Call, t: Any) -> int:
        for i in call.ins:
            entry = self.entries[i] if i < len(self.entries) else None
            if entry is not None and entry.tensor is t:
                return entry.version
        return values.version(t)

    def reduce_held(self) -> None:
        for table in (self.bw_prev, self.bw):
            if table is not None:
                table.reduce_held()
        self.held = 0

    def link_backward(self) -> None:
        """Note the finished outermost forward's calls in the backward table, by the indices of their hooked tensors."""
        table = self.bw
        if not table.size:
            return
        entries = self.entries
        base = len(table.calls)
        position = {id(call): base + i for i, call in enumerate(self.calls)}
        for call in self.calls:
            table.calls.append((call.module, None if call.parent is None else position.get(id(call.parent)),
                                call.root, [entries[i].bw for i in call.ins if entries[i].bw >= 0],
                                [entries[i].bw for i in call.outs if entries[i].bw >= 0]))

    def end_forward(self) -> None:
        """Forget the outermost forward (its tensors are no longer needed)."""
        self.entries = []
        self.calls = []
        self.by_id = {}
        self.stack.clear()
        if self.bw.size >= MAX_ENTRIES:
            self.bw.open = False

    def clear(self) -> None:
        """Drop every tensor and module held (the end of the run)."""
        self.stack, self.calls, self.entries, self.by_id = [], [], [], {}
        self.bw, self.bw_prev = BwTable(open=False), None
