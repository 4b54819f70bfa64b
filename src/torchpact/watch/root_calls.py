"""A model's outermost calls, seen without torch's global module hooks.

While any global module hook is registered, every module call in the process leaves torch's fast
path in ``Module._call_impl`` for the slow one, whatever the hook does: on torch 2.13 CPU an empty
pair adds 2.3–5 µs to each call, which a rollout of tiny modules pays tens of thousands of times.
On a step where no watcher needs the calls inside a model, the session takes those hooks off and
sees the outermost calls (the ones some watchers still need) through a ``__call__`` set on the
classes of the models it saw called at the top level. That costs one Python frame per call of
those classes and nothing for any other module.

Grad-disabled calls: on a step where the global hooks are on, the classes' ``__call__`` is set too,
and it takes a model's outermost call made with grad disabled (inference, evaluation, an RL rollout,
text generation under ``torch.no_grad()`` or ``inference_mode``) off the global hooks for that call:
such a forward is no optimizer step's forward (its outputs cannot carry a gradient into a step), so
the calls inside it cost what they cost without torchpact, while the outermost call still reaches
the watchers that look at model calls (a model left in training mode during an evaluation, a NaN in
its output). Before this, a rollout of 2048 environment steps made before the first optimizer step
(stable-baselines3's PPO) ran every one of its module calls through the hooks of a sampled step.

Why the class and not the instance: an instance hook lives in the module's ``__dict__``, so
``copy.deepcopy(model)`` (an EMA copy) would copy it, ``torch.save(model)`` would try to pickle it,
and ``torch.jit.script`` would try to compile it. A class attribute is none of these. Only classes
that inherit ``nn.Module.__call__`` unchanged are touched, and every one is restored when the
session moves back to the global hooks or closes.
"""

from __future__ import annotations

from typing import Any, Callable

from torchpact.userframes import passes_through


class RootCalls:
    """Sets and restores ``__call__`` on the classes of the models called at the top level."""

    def __init__(self, stack: list[Any], pre: Callable[[Any, tuple], None],
                 post: Callable[[Any, tuple, dict, Any], None],
                 hooked: Callable[[], bool | None] = lambda: None,
                 set_hooks: Callable[[bool], bool] = lambda on: False) -> None:
        """``hooked()``: None when the global module hooks are off, else whether they may be taken off for one call;
        ``set_hooks(False)`` takes them off (False when it could not), ``set_hooks(True)`` puts them back."""
        self.classes: set[type] = set()
        self.on = False
        self._patched: list[type] = []
        self._hooks = (stack, pre, post, hooked, set_hooks)
        self._call: Callable[..., Any] | None = None  # made on first use: it needs torch

    def note(self, cls: type) -> None:
        """A class whose instance was called at the top level."""
        if cls not in self.classes:
            self.classes.add(cls)
            if self.on:
                self._patch(cls)

    def install(self) -> None:
        if not self.on:
            self.on = True
            for cls in self.classes:
                self._patch(cls)

    def remove(self) -> None:
        self.on = False
        while self._patched:
            cls = self._patched.pop()
            if cls.__dict__.get("__call__") is self._call:
                try:
                    delattr(cls, "__call__")
                except (AttributeError, TypeError):  # pragma: no cover - a class that forbids it
                    pass

    def _patch(self, cls: type) -> None:
        import torch.nn as nn

        if self._call is None:
            self._call = _make_call(*self._hooks)
        if "__call__" in cls.__dict__ or getattr(cls, "__call__", None) is not nn.Module.__call__:  # noqa: B004
            return  # a class with its own __call__ (OptimizedModule, ScriptModule, ...): not ours to change
        try:
            cls.__call__ = self._call  # type: ignore[method-assign]
        except (AttributeError, TypeError):  # pragma: no cover - an extension type
            return
        self._patched.append(cls)


def _make_call(stack: list[Any], pre: Callable[[Any, tuple], None], post: Callable[[Any, tuple, dict, Any], None],
               hooked: Callable[[], bool | None], set_hooks: Callable[[bool], bool]) -> Callable[..., Any]:
    import torch
    import torch.nn as nn

    module_class = nn.Module
    grad_enabled = torch.is_grad_enabled

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        # `nn.Module.__call__` is looked up at each call: torch.fx swaps it while it traces.
        if stack:  # inside another model's forward: not an outermost call
            return module_class.__call__(self, *args, **kwargs)
        unhooked = False
        may = hooked()  # None: no global hooks; False: on, and to stay on; True: on, may come off
        if may is not None:
            if not may or grad_enabled():  # a forward a step may train on: the global hooks see it whole
                return module_class.__call__(self, *args, **kwargs)
            unhooked = set_hooks(False)
            if not unhooked:  # another global hook is there: the global hooks see the call
                return module_class.__call__(self, *args, **kwargs)
        try:
            pre(self, args)
            try:
                output = module_class.__call__(self, *args, **kwargs)
            except BaseException:
                post(self, args, kwargs, None)  # as torch's always_call forward hook does when forward raises
                raise
            post(self, args, kwargs, output)
            return output
        finally:
            if unhooked:
                set_hooks(True)

    return passes_through(__call__)


class Parked:
    """The global module hooks taken out of torch's tables for one outermost call and put back after it,
    so that the calls inside it take torch's fast path. Cheaper than removing and registering them again
    (no handles made), and the same handles stay valid. Only done while the session's hooks are the only
    global module hooks: then taking them out and putting them back keeps their order."""

    def __init__(self) -> None:
        import torch.nn.modules.module as m

        self._hooks = (m._global_forward_pre_hooks, m._global_forward_hooks, m._global_backward_pre_hooks,
                       m._global_backward_hooks)
        self._tables = (*self._hooks, m._global_forward_hooks_always_called, m._global_forward_hooks_with_kwargs)
        self._taken: list[tuple[dict, int, Any]] = []

    def take(self, ids: frozenset[int]) -> bool:
        """Takes out the hooks of handle ``ids``; False (nothing taken) when another global hook is there."""
        # Only the tables of hooks count: the flag tables (always_called, with_kwargs) keep the ids of removed
        # hooks on torch 2.13 (a with_kwargs hook's handle does not clear its flag), which are no hooks at all.
        for table in self._hooks:
            for key in table:
                if key not in ids:
                    return False
        taken = self._taken
        for table in self._tables:
            while table:
                key, value = table.popitem()
                taken.append((table, key, value))
        return True

    def put_back(self) -> None:
        taken = self._taken
        while taken:
            table, key, value = taken.pop()
            table[key] = value
