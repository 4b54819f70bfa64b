"""The session: installs torch's global hooks, owns every handle, feeds the watchers, removes it all.

Hooks used: ``register_module_forward_pre_hook`` / ``register_module_forward_hook`` (always_call, so
the module stack stays right when a forward raises) and ``register_optimizer_step_pre_hook`` /
``_post_hook``. The module hooks are on only for steps where a watcher needs the calls inside models
(sampled steps): any global module hook takes every module call off torch's fast path. On the other
steps the models' outermost calls, which some watchers still need, come through their classes
(``root_calls``). A model called with grad disabled (evaluation, a rollout, generation) is no step's
forward: its outermost call is taken off the global hooks even on a sampled step and delivered as an
unsampled step's (not on periodic steps, which record evaluations whole for ``nonfinite``). No global *full backward* hook: on torch 2.13 it wraps every module's outputs in a
``BackwardHookFunction``, which makes ``nn.ReLU(inplace=True)`` raise "Output 0 of
BackwardHookFunction is a view and is being modified inplace" — a watcher must never change what
the script does. Watchers that need gradients of module outputs register tensor hooks on sampled
steps instead, which do not change the graph.

While torch traces or compiles (``watch.tracing``) every hook returns at once, so Dynamo traces them as
no-ops: what runs inside compiled code (a compiled model's inner modules, a compiled ``optimizer.step()``)
is not seen, and the compiled graph is the one torch builds without torchpact. While one of torch's
tracers runs, the hooks are off altogether (``tracer_pause``).
"""

from __future__ import annotations

import contextlib
import operator
import sys
import time
import weakref
from typing import Any, Callable, Iterable, NamedTuple, TextIO

from torchpact.findings import Category, Finding, Severity, relative_path
from torchpact.watch.dynamo import DynamoGuard
from torchpact.watch.facts import Facts
from torchpact.watch.tracer_pause import pause_while_tracing
from torchpact.watch.frames import user_location
from torchpact.watch.naming import Names
from torchpact.watch.root_calls import Parked, RootCalls
from torchpact.watch.tracing import traced
from torchpact.userframes import passes_through
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers._patch import Patches, open_patches, remove_all

INTERNAL_CODE = "TP002"
# Steps one other optimizer makes while the primary makes none, before it takes over as the step counter:
# more than any inner loop (WGAN's critic steps 5 times per generator step), and few enough that the next
# layer of a layer-wise training (pytorch/examples' forward-forward) is sampled again soon.
HANDOVER_STEPS = 20
_STEP_WRAPPER: Any = None  # the code of the wrapper torch puts around every optimizer class's step()


class Sampler(NamedTuple):
    """Which steps run the expensive checks: every step at first, then every ``every``-th, and the step
    after a sampled one whenever a watcher asks for it (``Session.sample_next``): a check that saw
    something begin (a gradient norm jumping, an update far too large) confirms it on consecutive
    steps, while a healthy run pays for ``first`` steps and one in ``every``.

    ``every`` is 20, not 10: a periodic step's checks cost a tiny MLP's step 2.5 times its own work
    (0.88 ms on a 0.35 ms step, torch 2.13 CPU) and a small GPT's 6% (4.6 ms), and at one in 10 the
    periodic steps were 1.3% of a 300-step tiny script's whole run (start-up included) and 0.5% of
    a 120-step GPT's; at one in 20 a problem that begins mid-run is seen at most 20 steps late, and
    is then confirmed on consecutive steps as before. Long runs are spaced further by the budget.

    On a script of small modules the checks of a sampled step cost two to three times the step's own
    work (measured on torch 2.13 CPU: an RL rollout's sampled episode takes 2.4x a plain one), so a
    script with thousands of module calls per step would pay it many times over: sampled steps may
    also spend at most ``calls`` module calls, plus ``share`` of all the calls the script made (at
    that cost a 1% share keeps the long-run overhead of sampling near 3%). A sampled step's calls
    count against that budget, plus ``charge`` for the checks every sampled step makes whatever its
    calls (gradient norms, parameter snapshots: on a tiny MLP about 0.7 ms, the plain work of 12
    module calls of 59 us); a step the pattern picks is skipped while the budget cannot pay for it.
    Without the charge a model of 6 calls a step had 333 sampled steps for free and a 3000-step run
    of it paid 1.3x for sampling alone. Counted in calls, not seconds, so the choice is the same on
    every machine. ``calls=None`` lifts the budget.

    A ``NamedTuple`` for the reason ``Check`` is one: no ``exec`` at the start-up of every run.
    """

    first: int = 10
    every: int = 20
    calls: int | None = 2000
    share: float = 0.01
    charge: int = 12

    def __call__(self, step: int) -> bool:
        return step < self.first or step % self.every == 0

    def periodic(self, step: int) -> bool:
        """Whether ``step`` is one of the every-``every``-th steps past the first ones."""
        return step >= self.first and step % self.every == 0

    def affordable(self, spent: int, done: int, steps: int) -> bool:
        """Whether one more sampled step fits at step ``steps``, after ``done`` sampled steps that made
        ``spent`` module calls."""
        if self.calls is None or done == 0:
            return True
        per_step = spent / done
        return spent + (done + 1) * self.charge + per_step <= self.calls + self.share * per_step * steps


_UNSAMPLED_CALLS = operator.attrgetter("unsampled_calls")
_RAISED = object()   # no output argument: see Session._forward
_CALLBACKS = ("on_forward_pre", "on_forward", "on_step_pre", "on_step", "on_step_end", "on_close")
_FORWARD = ("on_forward_pre", "on_forward")


class Session:
    """One watched run. Use as a context manager (``torchpact.watch()``) or ``start()``/``close()``."""

    def __init__(self, watchers: Iterable[Watcher], *, sampler: Sampler | None = None,
                 live: bool = False, stream: TextIO | None = None,
                 sink: Callable[["Session"], None] | None = None, rank: int | None = None) -> None:
        self.watchers = list(watchers)
        # Called after every new finding and at close: a rank of a distributed job saves its report
        # as it goes, so even a rank killed by the launcher leaves what it saw.
        self.sink = sink
        self.rank = rank
        self.sampler = sampler or Sampler()
        self.live = live
        self.stream = stream or sys.stderr
        self.findings: list[Finding] = []
        self.facts = Facts()   # typed facts watchers publish for each other (watch/facts.py)
        self.names = Names()
        self.step = 0
        self._sampled = False
        self._pre_root: tuple[tuple[Watcher, Callable], ...] = ()   # (watcher, callback) this step
        self._pre_inner: tuple[tuple[Watcher, Callable], ...] = ()
        self._post_root: tuple[tuple[Watcher, Callable], ...] = ()
        self._post_inner: tuple[tuple[Watcher, Callable], ...] = ()
        self._steps: dict[str, tuple[tuple[Watcher, Callable], ...]] = {
            cb: () for cb in ("on_step_pre", "on_step", "on_step_end")}   # step callbacks, bound
        self._unsampled_steps = self._steps   # the same on unsampled steps, without idle and sampled-only ones
        self._group = False          # a default process group exists (see Watcher.needs_process_group)
        self._idle: tuple[Watcher, ...] = ()   # watchers that wait for one
        self._forward_watchers: tuple[Watcher, ...] = ()
        self._routed: tuple = ()
        self._unsampled_roots: tuple = ((), (), ())  # (route key, pre, post) for grad-disabled outermost calls
        self._before_root: tuple = ()
        self._parked: Parked | None = None
        self._sampled_calls = 0      # module calls made on sampled steps: the sampler's budget
        self._sampled_steps = 0
        self._follow_up = False      # a watcher asked for the next step to be sampled too
        self._dynamo_guard: DynamoGuard | None = None
        self.closed = False
        self.started_at = time.perf_counter()
        self.step_times: list[float] = []
        self._step_started = self.started_at
        self._handles: list[Any] = []          # optimizer hooks
        self._stepping: dict[int, int] = {}    # optimizer id -> step() calls running (nested ones included)
        self._module_handles: list[Any] = []   # the global module hooks, while they are on
        self._trained = False
        self._stack: list[Any] = []
        self._paused: list[tuple[bool, bool]] = []   # per tracer running: (module hooks on, root calls on) before it
        self._tracer_patches: list[Any] = []
        self._patches = Patches()   # the registry of the patches made while the session is open (start() opens it)
        self._root_calls = RootCalls(self._stack, self._forward_pre, self._forward, self._hooks_on_for_roots,
                                     self._set_hooks_for_root)
        self._started = False
        self._primary: weakref.ref | None = None   # the optimizer whose steps are the script's steps
        self._since_primary: dict[int, int] = {}    # optimizer id -> its steps since the primary's last one
        self._optimizers: dict[int, weakref.ref] = {}   # by id, in the order they first stepped
        self._reported: set[tuple] = set()
        self._subscribers: dict[str, list[Watcher]] = {}
        # What watchers compute from the same tensors in one step callback delivery (the gradients' norms,
        # read by three watchers in the step pre-hook): kept for that delivery only.
        self.shared: dict[str, Any] = {}
        self.root_call_sites: dict[int, tuple[str | None, int | None]] = {}
        # The keyword arguments of the outermost call whose ``on_forward`` is being delivered (None when torch
        # did not pass them: its hooks get none when the forward raised).
        self.root_kwargs: dict[str, Any] | None = None
        self.sampled = self.sampler(0)
        self.periodic = self._periodic(0, follow_up=False)

    @property
    def sampled(self) -> bool:
        """Whether this step runs the expensive checks (see ``Sampler``)."""
        return self._sampled

    @sampled.setter
    def sampled(self, value: bool) -> None:
        self._sampled = value
        key = self._route_key()
        if key != self._routed:  # most steps change nothing: keep the routes
            self._route_forwards(key)
        self._arrange_module_hooks()

    @property
    def exact_stack(self) -> bool:
        """Whether ``module_stack()`` holds every module running now; on unsampled steps that need no
        more, it holds the outermost model only (see ``_arrange_module_hooks``)."""
        return bool(self._module_handles) or self.closed

    def _arrange_module_hooks(self) -> None:
        """How module calls reach the session this step: torch's global hooks when a watcher needs calls
        inside models (sampled steps, or a watcher's ``unsampled_calls`` of "all"); otherwise the models'
        outermost calls through their classes (``RootCalls``) when a watcher asks for "roots", else none.
        Switched between steps only, never inside a forward; always the global hooks once dynamo compiles."""
        if not self._started or self.closed or self._stack or self._paused:
            return
        guard = self._dynamo_guard
        if self._sampled or self._pre_inner or self._post_inner or (guard is not None and guard.started):
            want = "all"  # (the routes say what the watchers asked for)
        else:
            want = "roots" if self._pre_root or self._post_root else "none"
        if want == "all":
            self._set_module_hooks(True)
            if guard is not None and guard.started:
                self._root_calls.remove()
            else:  # takes the grad-disabled outermost calls off the global hooks (see root_calls)
                self._root_calls.install()
        else:
            self._set_module_hooks(False)
            if want == "roots":
                self._root_calls.install()
            else:
                self._root_calls.remove()

    def _set_module_hooks(self, on: bool) -> None:
        if on == bool(self._module_handles):
            return
        if on:
            import torch.nn.modules.module as module_hooks

            self._module_handles = [
                module_hooks.register_module_forward_pre_hook(self._forward_pre),
                module_hooks.register_module_forward_hook(self._forward, with_kwargs=True, always_call=True)]
        else:
            while self._module_handles:
                self._module_handles.pop().remove()

    def _hooks_on_for_roots(self) -> bool | None:
        """Whether an outermost call with grad disabled may be taken off the global hooks now: not once dynamo
        compiles, and not on a periodic sampled step, which records evaluations whole (``nonfinite``)."""
        if not self._module_handles:
            return None
        guard = self._dynamo_guard
        return not self.periodic and not (guard is not None and guard.started)

    def _set_hooks_for_root(self, on: bool) -> bool:
        """Around an outermost call made with grad disabled on a step with the global hooks on: the hooks
        taken out (see root_calls), and the call taken as an unsampled step's, as it is no step's forward;
        then all put back. False when the hooks cannot be taken out (another global module hook)."""
        if on:
            self._parked.put_back()
            self._sampled, self._pre_root, self._post_root = self._before_root
            return True
        if self._parked is None:
            self._parked = Parked()
        if not self._parked.take(frozenset(h.id for h in self._module_handles)):
            return False
        self._before_root = (self._sampled, self._pre_root, self._post_root)
        self._sampled = False
        routed = self._routed
        key = (False, *routed[1:])
        if self._unsampled_roots[0] != key:
            pre_inner, post_inner = self._pre_inner, self._post_inner
            self._route_forwards(key)
            self._unsampled_roots = (key, self._pre_root, self._post_root)
            self._routed, self._pre_inner, self._post_inner = routed, pre_inner, post_inner
        _, self._pre_root, self._post_root = self._unsampled_roots
        return True

    def _dynamo_started(self) -> None:
        """torch.compile is about to trace: it must find the global hooks, never a class's ``__call__``."""
        if not self._paused:  # (a tracer puts them back when it returns)
            self._root_calls.remove()
            self._set_module_hooks(True)

    def _pause_for_tracer(self) -> None:
        """One of torch's tracers starts (see ``tracer_pause``): no module hook of ours while it runs."""
        self._paused.append((bool(self._module_handles), self._root_calls.on))
        self._root_calls.remove()
        self._set_module_hooks(False)

    def _resume_after_tracer(self) -> None:
        # restored as they were, even inside a forward (make_fx under a compiled submodule): the enclosing
        # modules' post hooks are still to come
        hooks, roots = self._paused.pop()
        if not self._paused and not self.closed:
            self._set_module_hooks(hooks)
            if roots:
                self._root_calls.install()
            self._arrange_module_hooks()

    def _route_key(self) -> tuple:
        """What the forward routes depend on: sampling, and what each watcher asks of unsampled calls."""
        return (self._sampled, self._group, *map(_UNSAMPLED_CALLS, self._forward_watchers))

    def _route_forwards(self, key: tuple) -> None:
        """Who gets which module calls this step: every call on sampled steps; on the others what each
        watcher's ``unsampled_calls`` asks for, so an unsampled module call costs the session O(1)."""
        self._routed = key
        wanted = {"all": 2, "roots": 1}
        pre: list[tuple[Watcher, Callable, int]] = []
        post: list[tuple[Watcher, Callable, int]] = []
        for cb, out in zip(_FORWARD, (pre, post)):
            for w in self._subscribers.get(cb, ()):
                if w in self._idle:
                    level = 0
                elif self._sampled:
                    level = 2
                else:
                    level = wanted.get(w.unsampled_calls, 0)
                if level:
                    out.append((w, getattr(w, cb), level))
        self._pre_root = tuple((w, f) for w, f, _ in pre)
        self._pre_inner = tuple((w, f) for w, f, level in pre if level == 2)
        self._post_root = tuple((w, f) for w, f, _ in post)
        self._post_inner = tuple((w, f) for w, f, level in post if level == 2)

    def _subscribe(self) -> None:
        """Bind each callback to the watchers that override it (again after a watcher failed)."""
        self._idle = () if self._group else tuple(w for w in self.watchers if w.needs_process_group)
        self._steps = {cb: tuple((w, getattr(w, cb)) for w in self._subscribers.get(cb, ()) if w not in self._idle)
                       for cb in ("on_step_pre", "on_step", "on_step_end")}
        self._unsampled_steps = {cb: tuple((w, f) for w, f in subs if cb not in w.sampled_only)
                                 for cb, subs in self._steps.items()}
        self._forward_watchers = tuple(
            w for w in self.watchers if any(w in self._subscribers.get(cb, ()) for cb in _FORWARD))
        self._route_forwards(self._route_key())
        self._arrange_module_hooks()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "Session":
        import torch.optim.optimizer as optimizer_hooks

        self._patches = open_patches()   # closed last in close(): every patch made while open comes off
        for w in self.watchers:
            w.attach(self)
        self._subscribers = {
            cb: [w for w in self.watchers if getattr(type(w), cb) is not getattr(Watcher, cb)]
            for cb in _CALLBACKS
        }
        self._subscribe()
        try:
            self._set_module_hooks(True)
            self._handles.append(optimizer_hooks.register_optimizer_step_pre_hook(self._step_pre))
            self._handles.append(optimizer_hooks.register_optimizer_step_post_hook(self._step_post))
            self._dynamo_guard = DynamoGuard(on_start=self._dynamo_started)
            self._tracer_patches = pause_while_tracing(self._pause_for_tracer, self._resume_after_tracer)
            self._started = True
        except BaseException:
            self._remove_hooks()
            self.closed = True
            for w in self._subscribers.get("on_close", []):  # let watchers undo what attach() set up
                self._call(w, "on_close")
            self._patches.close()
            raise
        self._arrange_module_hooks()
        return self

    def close(self) -> None:
        """Remove every hook, then let watchers conclude. Safe to call twice."""
        if self.closed:
            return
        self._remove_hooks()
        self.closed = True
        for w in self._subscribers.get("on_close", []):
            self._call(w, "on_close")
        self._patches.close()
        self._flush()

    def _flush(self) -> None:
        if self.sink is not None:
            try:
                self.sink(self)
            except Exception as exc:  # a full disk must not crash the user's training
                print(f"torchpact: cannot save the report: {exc}", file=self.stream)

    def _remove_hooks(self) -> None:
        if self._dynamo_guard is not None:
            self._dynamo_guard.remove()
            self._dynamo_guard = None
        remove_all(self._tracer_patches)
        self._root_calls.remove()
        self._handles.extend(self._module_handles)
        self._module_handles = []
        while self._handles:
            handle = self._handles.pop()
            try:
                handle.remove()
            except Exception:  # a handle torch already dropped
                pass

    def __enter__(self) -> "Session":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ hooks
    def _call(self, watcher: Watcher, callback: str, *args: Any) -> None:
        try:
            getattr(watcher, callback)(*args)
        except Exception as exc:  # a watcher bug must never break the user's training
            self._failed(watcher, callback, exc)

    def _failed(self, watcher: Watcher, callback: str, exc: Exception) -> None:
        for subs in self._subscribers.values():
            if watcher in subs:
                subs.remove(watcher)
        self._subscribe()
        self.report_raw(Finding(
                code=INTERNAL_CODE, category=Category.INPUT, severity=Severity.WARNING,
                message=f"watcher '{watcher.name}' failed in {callback} ({exc.__class__.__name__}: {exc}) "
                        "and was switched off; training was not affected — please report this",
                step=self.step, rank=self.rank))

    def _deliver(self, subscribers: tuple, callback: str, *args: Any) -> None:
        """Call each subscriber's bound ``callback``; a watcher that raises is switched off."""
        try:
            for w, bound in subscribers:
                try:
                    bound(*args)
                except Exception as exc:  # a watcher bug must never break the user's training
                    self._failed(w, callback, exc)
        finally:
            if self.shared:
                self.shared.clear()

    # The two module hooks run on every module call of the script: on unsampled steps they do O(1)
    # work and allocate nothing unless a watcher asked for those calls.
    def _forward_pre(self, module: Any, args: tuple) -> None:
        if traced():  # a tracer's or compiler's call, not the run's (see watch.tracing): Dynamo traces a no-op
            return
        stack = self._stack
        if stack:
            subscribers = self._pre_inner
        else:
            self._root_call(module)
            subscribers = self._pre_root
        stack.append(module)
        if self._sampled:
            self._sampled_calls += 1
        if not subscribers:
            return
        for w, callback in subscribers:  # inline: the hot path of every root call
            try:
                callback(module, args)
            except Exception as exc:  # a watcher bug must never break the user's training
                self._failed(w, "on_forward_pre", exc)

    def _root_call(self, module: Any) -> None:
        if not self._trained:  # step 0 is timed from the first forward, not from the imports
            self._trained = True
            self._step_started = time.perf_counter()
        self._root_calls.note(type(module))
        self.names.add_root(module)
        if self._sampled:
            self.root_call_sites[id(module)] = user_location(3)
            if self._idle:  # a group made before this forward: its models are called now
                self._look_for_group()

    def _forward(self, module: Any, args: tuple, kwargs: Any, output: Any = _RAISED) -> None:
        if traced():
            return
        if output is _RAISED:  # torch calls always_call hooks without the kwargs when the forward raised
            kwargs, output = None, kwargs
        stack = self._stack
        if stack and stack[-1] is module:
            stack.pop()
        elif module in stack:  # an inner forward raised; unwind to this module
            while stack and stack.pop() is not module:
                pass
        if stack:
            subscribers = self._post_inner
        else:
            subscribers = self._post_root
            self.root_kwargs = kwargs
        if not subscribers:
            return
        for w, callback in subscribers:
            try:
                callback(module, args, output)
            except Exception as exc:
                self._failed(w, "on_forward", exc)

    @contextlib.contextmanager
    def unobserved(self) -> Any:
        """Module calls made inside are not the script's outermost calls: a watcher's own replay of a step on
        private copies of the modules (whose calls bypass torch's module hooks, but not the ``__call__`` that
        ``RootCalls`` sets on root classes) reaches no watcher."""
        self._stack.append(None)
        try:
            yield
        finally:
            self._stack.pop()

    @property
    def depth(self) -> int:
        """How many module forwards are running right now (0 outside any module)."""
        return len(self._stack)

    def module_stack(self) -> list[Any]:
        return list(self._stack)

    def innermost_module(self) -> Any:
        """The module whose forward is running now, None outside any. When the stack is not kept in full
        (``exact_stack`` False), the nearest ``forward`` frame of a module says which."""
        stack = self._stack
        if self.exact_stack:
            return stack[-1] if stack else None
        import torch.nn as nn

        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_name == "forward":
                owner = frame.f_locals.get("self")
                if isinstance(owner, nn.Module):
                    return owner
            frame = frame.f_back
        return stack[-1] if stack else None

    def _nested_step(self, optimizer: Any, entering: bool) -> bool:
        """Whether this hook call belongs to a ``step()`` running inside another ``step()`` of the same
        optimizer: a subclass whose ``step`` calls ``super().step()`` runs torch's hooks twice when both
        classes' steps are wrapped (each class's is, once one of its instances exists). Only the outermost
        ``step()`` is a step. Counted per optimizer; an entry left open by a step that raised is told from a
        real nesting by looking for an outer ``step()`` frame of the optimizer, only then."""
        key = id(optimizer)
        open_steps = self._stepping.get(key, 0)
        if entering:
            if open_steps and not self._outer_step_frame(optimizer):
                open_steps = 0  # left open by a step() that raised
            self._stepping[key] = open_steps + 1
            return open_steps > 0
        if open_steps <= 1:
            self._stepping.pop(key, None)
            return False
        self._stepping[key] = open_steps - 1
        return True

    @staticmethod
    def _outer_step_frame(optimizer: Any) -> bool:
        global _STEP_WRAPPER
        if _STEP_WRAPPER is None:
            import torch

            _STEP_WRAPPER = torch.optim.Optimizer.profile_hook_step(lambda *a, **k: None).__code__
        frame, seen = sys._getframe(2), 0
        while frame is not None:
            if frame.f_code is _STEP_WRAPPER and frame.f_locals.get("self") is optimizer:
                seen += 1
                if seen > 1:
                    return True
            frame = frame.f_back
        return False

    def _step_pre(self, optimizer: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        if traced():  # a compiled step(): Dynamo traces this as a no-op, and the step goes unseen
            return None
        if self._nested_step(optimizer, entering=True):
            return None
        if self._idle:
            self._look_for_group()
        primary = self._primary() if self._primary is not None else None
        if primary is None:  # first optimizer, or the old one is gone
            self._primary = weakref.ref(optimizer)
        elif primary is not optimizer:
            count = self._since_primary[id(optimizer)] = self._since_primary.get(id(optimizer), 0) + 1
            if count >= HANDOVER_STEPS:  # the primary stopped stepping (layer-wise training): this one counts now
                self._primary = weakref.ref(optimizer)
        known = self._optimizers.get(id(optimizer))
        if known is None or known() is not optimizer:
            self._optimizers.pop(id(optimizer), None)  # a dead one's id, reused: this one comes last
            self._optimizers[id(optimizer)] = weakref.ref(optimizer)
        # `step(closure)` (LBFGS, Lightning's automatic optimization) runs the forward and backward inside
        # the step, after this hook: gradients are this step's only once the closure has returned.
        if kwargs.get("closure") is not None:
            return args, {**kwargs, "closure": self._then_step_pre(optimizer, kwargs["closure"])}
        if len(args) > 1 and args[1] is not None and callable(args[1]):
            return (args[0], self._then_step_pre(optimizer, args[1]), *args[2:]), kwargs
        self._deliver(self._step_subscribers("on_step_pre"), "on_step_pre", optimizer)
        return None

    def _then_step_pre(self, optimizer: Any, closure: Callable) -> Callable:
        """``closure`` that delivers ``on_step_pre`` after its first call (LBFGS calls it again later)."""
        delivered = False

        def closure_then_step_pre(*args: Any, **kwargs: Any) -> Any:
            nonlocal delivered
            loss = closure(*args, **kwargs)
            if not delivered:
                delivered = True
                self._deliver(self._step_subscribers("on_step_pre"), "on_step_pre", optimizer)
            return loss

        return passes_through(closure_then_step_pre)

    def _step_post(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        if traced():
            return
        if self._nested_step(optimizer, entering=False):
            return
        self._deliver(self._step_subscribers("on_step"), "on_step", optimizer)
        if self._primary is not None and self._primary() is optimizer:
            self._since_primary.clear()
            self._deliver(self._step_subscribers("on_step_end"), "on_step_end", self.step)
            if self._idle:
                self._look_for_group()
            now = time.perf_counter()
            self.step_times.append(now - self._step_started)
            self._step_started = now
            if self._sampled:
                self._sampled_steps += 1
            self.step += 1
            follow_up, self._follow_up = self._follow_up, False
            self.sampled = self._sample(self.step, follow_up)
            self.periodic = self._periodic(self.step, follow_up)

    def _step_subscribers(self, callback: str) -> tuple[tuple[Watcher, Callable], ...]:
        return (self._steps if self._sampled else self._unsampled_steps)[callback]

    def _look_for_group(self) -> None:
        """Wake the watchers that wait for a default process group once there is one (for good: a group
        destroyed later leaves them on)."""
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            self._group = True
            self._subscribe()

    def _periodic(self, step: int, follow_up: bool) -> bool:
        """Whether this sampled step is only one of the sampler's periodic ones: past its first steps, and
        not asked for by a watcher (a plain callable as sampler is an exact schedule: none is). A check
        that costs much per sampled step and locates what cheaper checks detect on every step may skip
        them (``nonfinite`` records modules on the other sampled steps only)."""
        return (self._sampled and not follow_up and isinstance(self.sampler, Sampler)
                and self.sampler.periodic(step))

    def sample_next(self) -> None:
        """Ask for the next step to be sampled too (within the sampler's call budget), from a callback of
        a sampled step. A plain callable as sampler is taken as the exact schedule and ignores it."""
        self._follow_up = True

    def _sample(self, step: int, follow_up: bool = False, sampled_steps: int | None = None) -> bool:
        if not (self.sampler(step) or (follow_up and isinstance(self.sampler, Sampler))):
            return False
        affordable = getattr(self.sampler, "affordable", None)  # a plain callable has no budget
        done = self._sampled_steps if sampled_steps is None else sampled_steps
        if affordable is None or not done:
            return True
        return affordable(self._sampled_calls, done, step)

    def will_sample(self, step: int) -> bool:
        """Whether ``step`` (this one or the next) is to be sampled, as far as can be told now."""
        if step == self.step:
            return self.sampled
        # Asked from a callback of this step, which ``_step_post`` counts only once its callbacks are over:
        # counted here as it will be, or the first sampled step of a budget-bound script (an RL rollout)
        # would promise a second one that the budget then refuses.
        return self._sample(step, self._follow_up and step == self.step + 1,
                            self._sampled_steps + (1 if self._sampled else 0))

    def data(self) -> dict[str, Any]:
        """Each watcher's plain data (series for plots), by watcher name; empty ones left out."""
        out: dict[str, Any] = {}
        for w in self.watchers:
            try:
                d = w.data()
            except Exception:  # reports must not fail because one watcher's data did
                continue
            if d:
                out[w.name] = d
        return out

    def primary_optimizer(self) -> Any:
        """The optimizer whose steps are the script's steps (None before the first step or once it is gone)."""
        return self._primary() if self._primary is not None else None

    def optimizers(self) -> list[Any]:
        """Optimizers that have stepped at least once, primary first."""
        alive = [o for o in (r() for r in self._optimizers.values()) if o is not None]
        primary = self._primary() if self._primary is not None else None
        if alive and alive[0] is not primary and primary is not None:  # another one took over counting steps
            alive.remove(primary)
            alive.insert(0, primary)
        return alive

    # ------------------------------------------------------------------ findings
    def report(self, check: Check, message: str, *, subject: str | None = None, fix: str | None = None,
               path: str | None = None, line: int | None = None, step: int | None = None,
               severity: Severity | None = None, key: Any = None, **extra: Any) -> Finding | None:
        """Record a finding of ``check``; once per (code, subject or key). Returns None for a repeat."""
        dedup = (check.code, key if key is not None else subject)
        if dedup in self._reported:
            return None
        self._reported.add(dedup)
        finding = Finding(
            code=check.code, category=check.category, severity=severity or check.severity,
            message=message, path=path, line=line, subject=subject, fix=fix,
            step=self.step if step is None else step, rank=self.rank, evidence=check.evidence, extra=extra)
        self.report_raw(finding)
        return finding

    def report_raw(self, finding: Finding) -> None:
        self.findings.append(finding)
        if self.live:
            where = f" {relative_path(finding.path)}:{finding.line}" if finding.path and finding.line else ""
            step = f" step {finding.step}" if finding.step is not None else ""
            rank = f" rank {finding.rank}" if finding.rank is not None else ""
            print(f"torchpact: {finding.code} {finding.severity.value}{rank}{step}{where}: {finding.message}",
                  file=self.stream, flush=True)
        self._flush()
