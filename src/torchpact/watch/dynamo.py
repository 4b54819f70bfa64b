"""Keeping torch.compile out of the session's hooks at no cost to scripts that do not compile.

Dynamo must not trace into the hooks (it fails on their Python state, e.g. "already tracked for
mutation"): compiled code has to call them eagerly. ``torch.compiler.disable`` does that, but its
wrapper costs a few microseconds on every call (it switches the frame evaluator off and on), which
on a script of tiny modules is most of the session's cost. So the hooks are registered bare and
swapped in place (same handle, same position among the global hooks) for their disabled versions
when dynamo starts compiling for the first time: its compile-start callback runs before it traces a
frame. The callback is registered once ``torch._dynamo`` is imported (every optimizer imports it);
importing it ourselves would cost a script without an optimizer about 2 CPU-seconds.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from typing import Any, Callable, Iterable

_DYNAMO = "torch._dynamo"


class DynamoGuard:
    """Disables dynamo on the hooks behind ``handles`` when the first compilation starts, after calling
    ``on_start`` (which may change ``handles``)."""

    def __init__(self, handles: Iterable[Any], on_start: Callable[[], None] | None = None) -> None:
        self.handles = list(handles)
        self.started = False
        self._on_start = on_start
        self._finder: _OnImport | None = None
        self._callback: Any = None
        if _DYNAMO in sys.modules:
            self._register()
        else:
            self._finder = _OnImport(self._register)
            sys.meta_path.insert(0, self._finder)

    def _register(self) -> None:
        self._finder = None
        handler = getattr(sys.modules.get(_DYNAMO), "callback_handler", None)
        if handler is None:  # a torch without compile callbacks: the old way, at once
            self.start()
            return
        self._callback = handler.register_start_callback(lambda _args: self.start())

    def start(self) -> None:
        if not self.started:
            self.started = True
            if self._on_start is not None:
                self._on_start()
        self.disable()

    def disable(self) -> None:
        """Wrap each hook in ``torch.compiler.disable``, in place; a hook already wrapped is kept."""
        from torch.compiler import disable

        for handle in self.handles:
            hooks = handle.hooks_dict_ref()
            hook = hooks.get(handle.id) if hooks is not None else None
            if hook is not None and not getattr(hook, "_torchdynamo_disable", False):
                hooks[handle.id] = disable(hook)

    def remove(self) -> None:
        """Stop watching for dynamo (the hooks themselves are removed by the session)."""
        if self._finder is not None:
            self._finder.remove()
            self._finder = None
        if self._callback is not None:
            try:
                sys.modules[_DYNAMO].callback_handler.remove_start_callback(self._callback)
            except (KeyError, AttributeError, ValueError):
                pass
            self._callback = None


class _OnImport(importlib.abc.MetaPathFinder):
    """Runs ``callback`` once, right after ``torch._dynamo`` finished importing."""

    def __init__(self, callback: Any) -> None:
        self.callback = callback
        self._busy = threading.local()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != _DYNAMO or getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        finally:
            self._busy.on = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _Loader(spec.loader, self)
        return spec

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


class _Loader(importlib.abc.Loader):
    def __init__(self, loader: Any, finder: _OnImport) -> None:
        self.loader, self.finder = loader, finder

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        self.finder.remove()
        self.finder.callback()

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ... for tracebacks
        return getattr(self.loader, name)
