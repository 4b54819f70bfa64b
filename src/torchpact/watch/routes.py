"""Which watcher gets which callback: only the callbacks a watcher overrides; not before a default process
group exists for watchers that need one; on unsampled steps only the module calls each watcher asks for
(``Watcher.unsampled_calls``) and no step callback it marked ``sampled_only``. A watcher that failed is
dropped. The tables hold bound methods, made once per change, so a delivery costs no lookup by name."""

from __future__ import annotations

import operator
from typing import Any, Callable, NamedTuple

from torchpact.watch.watcher import Watcher

#: (watcher, its bound callback) per subscriber, in the session's order of watchers
Bound = tuple[tuple[Watcher, Callable[..., Any]], ...]

FORWARD = ("on_forward_pre", "on_forward")
STEP = ("on_step_pre", "on_step", "on_step_end")
CALLBACKS = (*FORWARD, *STEP, "on_close")
_UNSAMPLED_CALLS = operator.attrgetter("unsampled_calls")
_LEVEL = {"all": 2, "roots": 1}   # 2: every module call, 1: the outermost ones


class ForwardRoutes(NamedTuple):
    """Who gets the module calls of a step: at the top level (root) and inside a model (inner)."""

    pre_root: Bound
    pre_inner: Bound
    post_root: Bound
    post_inner: Bound


NO_FORWARDS = ForwardRoutes((), (), (), ())


class Routes:
    """The subscribers of each callback, from ``start()`` on."""

    def __init__(self, watchers: list[Watcher]) -> None:
        self.watchers = watchers
        self.subscribers: dict[str, list[Watcher]] = {}
        self.group = False                  # a default process group exists (see Watcher.needs_process_group)
        self.idle: tuple[Watcher, ...] = ()   # watchers that wait for one
        self.steps: dict[str, Bound] = {cb: () for cb in STEP}
        self.unsampled_steps = self.steps   # the same on unsampled steps, without sampled-only ones
        self._forward_watchers: tuple[Watcher, ...] = ()

    def start(self) -> None:
        """Subscribe each watcher to the callbacks its class overrides."""
        self.subscribers = {
            cb: [w for w in self.watchers if getattr(type(w), cb) is not getattr(Watcher, cb)] for cb in CALLBACKS}
        self.subscribe()

    def drop(self, watcher: Watcher) -> None:
        """``watcher`` gets no callback any more (then ``subscribe()``)."""
        for subs in self.subscribers.values():
            if watcher in subs:
                subs.remove(watcher)

    def subscribe(self) -> None:
        """The step tables again (after ``start``, ``drop`` or a group found)."""
        subscribers = self.subscribers
        self.idle = () if self.group else tuple(w for w in self.watchers if w.needs_process_group)
        self.steps = {cb: tuple((w, getattr(w, cb)) for w in subscribers.get(cb, ()) if w not in self.idle)
                      for cb in STEP}
        self.unsampled_steps = {cb: tuple((w, f) for w, f in subs if cb not in w.sampled_only)
                                for cb, subs in self.steps.items()}
        self._forward_watchers = tuple(
            w for w in self.watchers if any(w in subscribers.get(cb, ()) for cb in FORWARD))

    def key(self, sampled: bool) -> tuple[Any, ...]:
        """What ``forwards(sampled)`` depends on: sampling, the group, and what each watcher asks of unsampled
        calls (a watcher may change that at run time)."""
        return (sampled, self.group, *map(_UNSAMPLED_CALLS, self._forward_watchers))

    def forwards(self, sampled: bool) -> ForwardRoutes:
        """Every call on sampled steps; on the others what each watcher's ``unsampled_calls`` asks for, so an
        unsampled module call costs the session O(1)."""
        pre: list[tuple[Watcher, Callable[..., Any], int]] = []
        post: list[tuple[Watcher, Callable[..., Any], int]] = []
        for cb, out in zip(FORWARD, (pre, post), strict=True):
            for w in self.subscribers.get(cb, ()):
                if w in self.idle:
                    level = 0
                elif sampled:
                    level = 2
                else:
                    level = _LEVEL.get(w.unsampled_calls, 0)
                if level:
                    out.append((w, getattr(w, cb), level))
        return ForwardRoutes(tuple((w, f) for w, f, _ in pre), tuple((w, f) for w, f, level in pre if level == 2),
                             tuple((w, f) for w, f, _ in post), tuple((w, f) for w, f, level in post if level == 2))
