"""The session: installs torch's global hooks, owns every handle, feeds the watchers, removes it all.

Hooks used: ``register_module_forward_pre_hook`` / ``register_module_forward_hook`` (always_call, so
the module stack stays right when a forward raises) and ``register_optimizer_step_pre_hook`` /
``_post_hook``. The module hooks are on only for steps where a watcher needs the calls inside models
(sampled steps): any global module hook takes every module call off torch's fast path. On the other
steps the models' outermost calls, which some watchers still need, come through their classes
(``root_calls``). A model called with grad disabled (evaluation, a rollout, generation) is no step's
forward: its outermost call is taken off the global hooks even on a sampled step and delivered as an
unsampled step's (not on periodic steps, which record evaluations whole for ``nonfinite``). No global
*full backward* hook: on torch 2.13 it wraps every module's outputs in a ``BackwardHookFunction``, which
makes ``nn.ReLU(inplace=True)`` raise "Output 0 of BackwardHookFunction is a view and is being modified
inplace" — a watcher must never change what the script does. Watchers that need gradients of module
outputs register tensor hooks on sampled steps instead, which do not change the graph.

While torch traces or compiles (``watch.tracing``) every hook returns at once, so Dynamo traces them as
no-ops: what runs inside compiled code (a compiled model's inner modules, a compiled ``optimizer.step()``)
is not seen, and the compiled graph is the one torch builds without torchpact. While one of torch's
tracers runs, the hooks are off altogether (``tracer_pause``).
"""

from __future__ import annotations

import contextlib
import sys
import time
from types import FrameType
from typing import Any, Callable, Iterable, TextIO

from torchpact.checks import Check
from torchpact.findings import Category, Finding, Severity
from torchpact.userframes import passes_through
from torchpact.watch.facts import Facts
from torchpact.watch.finding_log import FindingLog
from torchpact.watch.frames import user_location
from torchpact.watch.hooks import TorchHooks
from torchpact.watch.naming import Names
from torchpact.watch.optimizer_steps import HANDOVER_STEPS, NESTED, PRIMARY, OptimizerSteps
from torchpact.watch.root_calls import RootCalls
from torchpact.watch.routes import NO_FORWARDS, Bound, ForwardRoutes, Routes
from torchpact.watch.sampling import Sampler, Sampling, Schedule
from torchpact.watch.step_cache import StepCache
from torchpact.watch.tracing import traced
from torchpact.watch.watcher import Watcher
from torchpact.watch.watchers._patch import Patches, open_patches
from torchpact.watch.watchers._sites import OptimizerSites

__all__ = ["HANDOVER_STEPS", "INTERNAL_CODE", "Sampler", "Session"]

INTERNAL_CODE = "TP002"
_RAISED = object()   # no output argument: see Session._forward


class Session:
    """One watched run. Use as a context manager (``torchpact.watch()``) or ``start()``/``close()``.

    The facade the watchers see, and the dispatch of torch's hook calls to them; its parts do the rest:
    ``TorchHooks`` (what is installed in torch), ``Routes`` (who gets which callback), ``Sampling`` (which
    steps are sampled), ``OptimizerSteps`` (which ``step()`` calls are steps), ``FindingLog`` and the
    per-delivery ``StepCache``. What runs on every module call reads the session's own attributes only."""

    def __init__(self, watchers: Iterable[Watcher], *, sampler: Schedule | None = None,
                 live: bool = False, stream: TextIO | None = None,
                 sink: Callable[[Session], None] | None = None, rank: int | None = None) -> None:
        self.watchers = list(watchers)
        # Called after every new finding and at close: a rank of a distributed job saves its report
        # as it goes, so even a rank killed by the launcher leaves what it saw.
        self.sink = sink
        self.rank = rank
        self.live = live
        self.stream = stream or sys.stderr
        self._log = FindingLog(rank=rank, live=live, stream=self.stream, flush=self._flush)
        self.findings = self._log.findings
        self._sampling = Sampling(sampler or Sampler())
        self._routes = Routes(self.watchers)
        self._steps = OptimizerSteps()
        # What watchers compute from the same tensors in one step callback delivery (the gradients' norms,
        # read by three watchers in the step pre-hook): kept for that delivery only.
        self.cache = StepCache()
        # where the script created its optimizers, recorded once a watcher asks for it (``_sites.SiteWatcher``)
        self.optimizer_sites = OptimizerSites()
        self.facts = Facts()   # typed facts watchers publish for each other (watch/facts.py)
        self._resting = False       # the sampled-only patches are off torch (see _arrange_patches)
        self._patches = Patches()   # the registry of the patches made while the session is open (start() opens it)
        self.names = Names()
        self.step = 0
        self.closed = False
        self.started_at = time.perf_counter()
        self.step_times: list[float] = []
        self.root_call_sites: dict[int, tuple[str | None, int | None]] = {}
        # The keyword arguments of the outermost call whose ``on_forward`` is being delivered (None when torch
        # did not pass them: its hooks get none when the forward raised).
        self.root_kwargs: dict[str, Any] | None = None
        # What the hooks read on every module call or step, kept here: the parts hand them over when they change.
        self._sampled = False
        self._pre_root, self._pre_inner, self._post_root, self._post_inner = NO_FORWARDS   # this step's
        self._step_routes: dict[str, Bound] = self._routes.steps   # step callbacks, bound
        self._unsampled_step_routes = self._step_routes   # the same on unsampled steps
        self._idle: tuple[Watcher, ...] = ()   # watchers waiting for a process group
        self._routed: tuple[Any, ...] = ()
        self._unsampled_roots: tuple[tuple[Any, ...], Bound, Bound] = ((), (), ())  # see _set_hooks_for_root
        self._before_root: tuple[bool, Bound, Bound] = (False, (), ())
        self._sampled_calls = 0      # module calls made on sampled steps: the sampler's budget
        self._stack: list[Any] = []
        self._trained = False
        self._step_started = self.started_at
        self._started = False
        self._root_calls = RootCalls(self._stack, self._forward_pre, self._forward, self._hooks_on_for_roots,
                                     self._set_hooks_for_root)
        self._hooks = TorchHooks(self._forward_pre, self._forward, self._root_calls)
        # bound once: called on every step
        self._route_key = self._routes.key
        self._enter_step = self._steps.enter
        self._leave_step = self._steps.leave
        self._next_sampled = self._sampling.next_step
        self.sampled = self._sampling.sampler(0)

    # ------------------------------------------------------------------ sampling
    @property
    def sampled(self) -> bool:
        """Whether this step runs the expensive checks (see ``Sampler``)."""
        return self._sampled

    @sampled.setter
    def sampled(self, value: bool) -> None:
        self._sampled = value
        key = self._route_key(value)
        if key != self._routed:  # most steps change nothing: keep the routes
            self._route_forwards(key)
        self._arrange_module_hooks()
        self._arrange_patches()

    @property
    def periodic(self) -> bool:
        """Whether this sampled step is only one of the sampler's periodic ones (see ``Sampling``)."""
        return self._sampling.periodic

    @property
    def sampler(self) -> Schedule:
        return self._sampling.sampler

    @sampler.setter
    def sampler(self, value: Schedule) -> None:
        """A watcher may narrow the schedule at attach (``step_profile``); a plain callable is exact."""
        self._sampling.sampler = value

    def sample_next(self) -> None:
        """Ask for the next step to be sampled too (within the sampler's call budget), from a callback of
        a sampled step. A plain callable as sampler is taken as the exact schedule and ignores it."""
        self._sampling.follow_up = True

    def will_sample(self, step: int) -> bool:
        """Whether ``step`` (this one or the next) is to be sampled, as far as can be told now."""
        return self._sampling.will_sample(step, self.step, self.sampled, self._sampled_calls)

    # ------------------------------------------------------------------ module hooks
    @property
    def exact_stack(self) -> bool:
        """Whether ``module_stack()`` holds every module running now; on unsampled steps that need no
        more, it holds the outermost model only (see ``_arrange_module_hooks``)."""
        return bool(self._hooks.module_handles) or self.closed

    def _arrange_module_hooks(self) -> None:
        """How module calls reach the session this step: torch's global hooks when a watcher needs calls
        inside models (sampled steps, or a watcher's ``unsampled_calls`` of "all"); otherwise the models'
        outermost calls through their classes (``RootCalls``) when a watcher asks for "roots", else none.
        Switched between steps only, never inside a forward; always the global hooks once dynamo compiles."""
        hooks = self._hooks
        if not self._started or self.closed or self._stack or hooks.paused:
            return
        if self._sampled or self._pre_inner or self._post_inner or hooks.compiling:
            hooks.arrange("all")  # (the routes say what the watchers asked for)
        else:
            hooks.arrange("roots" if self._pre_root or self._post_root else "none")

    def _arrange_patches(self) -> None:
        """The sampled-only wrappers off torch on unsampled steps (``Patches.rest``); on for good once dynamo
        compiles (its guards would see the attribute change at every switch and recompile)."""
        if not self._started or self.closed:
            return
        resting = not self._sampled and not self._hooks.compiling
        # the setter runs at every step: most change nothing; a tracer's pause defers the change to a later step
        if resting != self._resting and self._patches.rest(resting):
            self._resting = resting

    def _hooks_on_for_roots(self) -> bool | None:
        """Whether an outermost call with grad disabled may be taken off the global hooks now: not once dynamo
        compiles, and not on a periodic sampled step, which records evaluations whole (``nonfinite``)."""
        hooks = self._hooks
        if not hooks.module_handles:
            return None
        return not self._sampling.periodic and not hooks.compiling

    def _set_hooks_for_root(self, on: bool) -> bool:
        """Around an outermost call made with grad disabled on a step with the global hooks on: the hooks
        taken out (see root_calls), and the call taken as an unsampled step's, as it is no step's forward;
        then all put back. False when the hooks cannot be taken out (another global module hook)."""
        if on:
            self._hooks.put_back()
            self._sampled, self._pre_root, self._post_root = self._before_root
            return True
        if not self._hooks.take_out():
            return False
        self._before_root = (self._sampled, self._pre_root, self._post_root)
        self._sampled = False
        key = (False, *self._routed[1:])
        if self._unsampled_roots[0] != key:
            routes = self._routes.forwards(False)
            self._unsampled_roots = (key, routes.pre_root, routes.post_root)
        _, self._pre_root, self._post_root = self._unsampled_roots
        return True

    def _dynamo_started(self) -> None:
        self._hooks.dynamo_started()
        self._arrange_patches()

    def _pause_for_tracer(self) -> None:
        self._hooks.pause()

    def _resume_after_tracer(self) -> None:
        if self._hooks.resume(self.closed):
            self._arrange_module_hooks()

    def _route_forwards(self, key: tuple[Any, ...]) -> None:
        self._routed = key
        routes: ForwardRoutes = self._routes.forwards(key[0])
        self._pre_root, self._pre_inner, self._post_root, self._post_inner = routes

    def _subscribe(self) -> None:
        """Bind each callback to the watchers that override it (again after a watcher failed)."""
        routes = self._routes
        routes.subscribe()
        self._idle = routes.idle
        self._step_routes, self._unsampled_step_routes = routes.steps, routes.unsampled_steps
        self._route_forwards(self._route_key(self._sampled))
        self._arrange_module_hooks()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Session:
        self._patches = open_patches()   # closed last in close(): every patch made while open comes off
        for w in self.watchers:
            w.attach(self)
        self._routes.start()
        self._subscribe()
        try:
            self._hooks.install(self._step_pre, self._step_post, self._dynamo_started,
                                self._pause_for_tracer, self._resume_after_tracer)
            self._started = True
        except BaseException:
            self._hooks.remove()
            self.closed = True
            for w in self._routes.subscribers.get("on_close", []):  # let watchers undo what attach() set up
                self._call(w, "on_close")
            self.optimizer_sites.remove()
            self._patches.close()
            raise
        self._arrange_module_hooks()
        self._arrange_patches()
        return self

    def close(self) -> None:
        """Remove every hook, then let watchers conclude. Safe to call twice."""
        if self.closed:
            return
        self._hooks.remove()
        self.closed = True
        for w in self._routes.subscribers.get("on_close", []):
            self._call(w, "on_close")
        self.optimizer_sites.remove()  # after on_close: watchers name optimizers in what they report there
        self._patches.close()
        self._flush()

    def _flush(self) -> None:
        if self.sink is not None:
            try:
                self.sink(self)
            except Exception as exc:  # a full disk must not crash the user's training
                print(f"torchpact: cannot save the report: {exc}", file=self.stream)

    def __enter__(self) -> Session:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ delivery
    def _call(self, watcher: Watcher, callback: str, *args: Any) -> None:
        try:
            getattr(watcher, callback)(*args)
        except Exception as exc:  # a watcher bug must never break the user's training
            self._failed(watcher, callback, exc)

    def _failed(self, watcher: Watcher, callback: str, exc: Exception) -> None:
        self._routes.drop(watcher)
        self._subscribe()
        self.report_raw(Finding(
                code=INTERNAL_CODE, category=Category.INPUT, severity=Severity.WARNING,
                message=f"watcher '{watcher.name}' failed in {callback} ({exc.__class__.__name__}: {exc}) "
                        "and was switched off; training was not affected — please report this",
                step=self.step, rank=self.rank))

    def _deliver(self, subscribers: Bound, callback: str, *args: Any) -> None:
        """Call each subscriber's bound ``callback``; a watcher that raises is switched off."""
        try:
            for w, bound in subscribers:
                try:
                    bound(*args)
                except Exception as exc:  # a watcher bug must never break the user's training
                    self._failed(w, callback, exc)
        finally:
            cache = self.cache
            if cache.grad_norms is not None:
                cache.clear()

    # The two module hooks run on every module call of the script: on unsampled steps they do O(1)
    # work and allocate nothing unless a watcher asked for those calls.
    def _forward_pre(self, module: Any, args: tuple[Any, ...]) -> None:
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

    def _forward(self, module: Any, args: tuple[Any, ...], kwargs: Any, output: Any = _RAISED) -> None:
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

        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_name == "forward":
                owner = frame.f_locals.get("self")
                if isinstance(owner, nn.Module):
                    return owner
            frame = frame.f_back
        return stack[-1] if stack else None

    # ------------------------------------------------------------------ optimizer steps
    def _step_pre(self, optimizer: Any, args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        if traced():  # a compiled step(): Dynamo traces this as a no-op, and the step goes unseen
            return None
        if self._enter_step(optimizer):  # a step() inside a step() of the same optimizer
            return None
        if self._idle:
            self._look_for_group()
        # `step(closure)` (LBFGS, Lightning's automatic optimization) runs the forward and backward inside
        # the step, after this hook: gradients are this step's only once the closure has returned.
        if kwargs.get("closure") is not None:
            return args, {**kwargs, "closure": self._then_step_pre(optimizer, kwargs["closure"])}
        if len(args) > 1 and args[1] is not None and callable(args[1]):
            return (args[0], self._then_step_pre(optimizer, args[1]), *args[2:]), kwargs
        self._deliver(self._step_subscribers("on_step_pre"), "on_step_pre", optimizer)
        return None

    def _then_step_pre(self, optimizer: Any, closure: Callable[..., Any]) -> Callable[..., Any]:
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

    def _step_post(self, optimizer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if traced():
            return
        ended = self._leave_step(optimizer)
        if ended == NESTED:
            return
        self._deliver(self._step_subscribers("on_step"), "on_step", optimizer)
        if ended == PRIMARY:
            self._deliver(self._step_subscribers("on_step_end"), "on_step_end", self.step)
            if self._idle:
                self._look_for_group()
            now = time.perf_counter()
            self.step_times.append(now - self._step_started)
            self._step_started = now
            self.step += 1
            self.sampled = self._next_sampled(self.step, self._sampled, self._sampled_calls)

    def _step_subscribers(self, callback: str) -> Bound:
        return (self._step_routes if self._sampled else self._unsampled_step_routes)[callback]

    def _look_for_group(self) -> None:
        """Wake the watchers that wait for a default process group once there is one (for good: a group
        destroyed later leaves them on)."""
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            self._routes.group = True
            self._subscribe()

    def primary_optimizer(self) -> Any:
        """The optimizer whose steps are the script's steps (None before the first step or once it is gone)."""
        return self._steps.primary()

    def optimizers(self) -> list[Any]:
        """Optimizers that have stepped at least once, primary first."""
        return self._steps.optimizers()

    # ------------------------------------------------------------------ findings and data
    def report(self, check: Check, message: str, *, subject: str | None = None, fix: str | None = None,
               path: str | None = None, line: int | None = None, step: int | None = None,
               severity: Severity | None = None, key: Any = None, **extra: Any) -> Finding | None:
        """Record a finding of ``check``; once per (code, subject or key). Returns None for a repeat."""
        return self._log.report(check, message, step=self.step if step is None else step, subject=subject,
                                fix=fix, path=path, line=line, severity=severity, key=key, **extra)

    def report_raw(self, finding: Finding) -> None:
        self._log.add(finding)

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
