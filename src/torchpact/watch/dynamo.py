"""Knowing when torch.compile starts, at no cost to scripts that do not compile.

The session's hooks need no help from here to stay out of compiled code: their first act is to return
while anything traces (``watch.tracing``), which Dynamo traces as a no-op, so a compiled graph is the one
torch builds without torchpact — no graph break at each module or around ``optimizer.step()``, and
``fullgraph=True`` compiles as it does without torchpact. (Seeing global module hooks, Dynamo traces a compiled
model's ``Module.__call__`` rather than its ``forward``, so a fullgraph graph may list its inputs in another
order; its ops are the same.) (They used to be wrapped in
``torch.compiler.disable``: each wrapped hook became a graph break, a compiled optimizer step fell back
to eager, and a ``fullgraph=True`` model failed.) What the session needs is to know that Dynamo is about
to trace, to take the ``__call__`` it may have set on model classes off (``root_calls``). Dynamo's
compile-start callback says so before it traces a frame. The callback is registered once
``torch._dynamo`` is imported (every optimizer imports it); importing it ourselves would cost a script
without an optimizer about 2 CPU-seconds.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from typing import Any, Callable

_DYNAMO = "torch._dynamo"


class DynamoGuard:
    """Calls ``on_start`` when the first compilation starts."""

    def __init__(self, on_start: Callable[[], None] | None = None) -> None:
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

    def remove(self) -> None:
        """Stop watching for dynamo."""
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
