"""A model's outermost calls, seen without torch's global module hooks.

While any global module hook is registered, every module call in the process leaves torch's fast
path in ``Module._call_impl`` for the slow one, whatever the hook does: on torch 2.13 CPU an empty
pair adds 2.3–5 µs to each call, which a rollout of tiny modules pays tens of thousands of times.
On a step where no watcher needs the calls inside a model, the session takes those hooks off and
sees the outermost calls (the ones some watchers still need) through a ``__call__`` set on the
classes of the models it saw called at the top level. That costs one Python frame per call of
those classes and nothing for any other module.

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
                 post: Callable[[Any, tuple, dict, Any], None]) -> None:
        self.classes: set[type] = set()
        self.on = False
        self._patched: list[type] = []
        self._hooks = (stack, pre, post)
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
        if "__call__" in cls.__dict__ or getattr(cls, "__call__", None) is not nn.Module.__call__:
            return  # a class with its own __call__ (OptimizedModule, ScriptModule, ...): not ours to change
        try:
            cls.__call__ = self._call  # type: ignore[method-assign]
        except (AttributeError, TypeError):  # pragma: no cover - an extension type
            return
        self._patched.append(cls)


def _make_call(stack: list[Any], pre: Callable[[Any, tuple], None],
               post: Callable[[Any, tuple, dict, Any], None]) -> Callable[..., Any]:
    import torch.nn as nn

    module_class = nn.Module

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        # `nn.Module.__call__` is looked up at each call: torch.fx swaps it while it traces.
        if stack:  # inside another model's forward: not an outermost call
            return module_class.__call__(self, *args, **kwargs)
        pre(self, args)
        try:
            output = module_class.__call__(self, *args, **kwargs)
        except BaseException:
            post(self, args, kwargs, None)  # as torch's always_call forward hook does when forward raises
            raise
        post(self, args, kwargs, output)
        return output

    return passes_through(__call__)
