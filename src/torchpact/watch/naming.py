"""Names as the user knows them: modules by qualified name in their root model, parameters by full name."""

from __future__ import annotations

import weakref
from typing import Any

_WRAPPERS = ("DistributedDataParallel", "DataParallel", "FullyShardedDataParallel", "OptimizedModule")


class Names:
    """Registry filled from the root modules the script calls; holds no strong reference to them."""

    def __init__(self) -> None:
        self._modules: dict[int, tuple[weakref.ref, str]] = {}
        self._params: dict[int, tuple[weakref.ref, str]] = {}
        self.roots: list[weakref.ref] = []

    def add_root(self, module: Any) -> None:
        """Name every submodule and parameter of ``module`` (called on its first top-level call)."""
        if self._known(self._modules, module):
            return
        self.roots.append(weakref.ref(module))
        strip = ""
        if type(module).__name__ in _WRAPPERS:  # DDP(model): users know "encoder.x", not "module.encoder.x"
            strip = "_orig_mod." if type(module).__name__ == "OptimizedModule" else "module."
        for name, sub in module.named_modules(remove_duplicate=True):
            if strip and name.startswith(strip):
                name = name[len(strip):]
            elif strip and name == strip[:-1]:
                name = ""
            if not self._known(self._modules, sub):
                self._modules[id(sub)] = (weakref.ref(sub), name)
        for name, param in module.named_parameters(remove_duplicate=True):
            if strip and name.startswith(strip):
                name = name[len(strip):]
            if not self._known(self._params, param):
                self._params[id(param)] = (weakref.ref(param), name)

    @staticmethod
    def _known(table: dict, obj: Any) -> bool:
        entry = table.get(id(obj))
        return entry is not None and entry[0]() is obj

    def module(self, module: Any) -> str:
        """``encoder.layers.1.attn``; the root's class name for the root itself or unknown modules."""
        entry = self._modules.get(id(module))
        if entry is not None and entry[0]() is module and entry[1]:
            return entry[1]
        return type(module).__name__

    def param(self, param: Any) -> str:
        entry = self._params.get(id(param))
        if entry is not None and entry[0]() is param:
            return entry[1]
        return f"<unnamed {tuple(param.shape)} parameter>"

    def has_module(self, module: Any) -> bool:
        return self._known(self._modules, module)

    def has_param(self, param: Any) -> bool:
        return self._known(self._params, param)

    def named_parameters(self) -> list[tuple[str, Any]]:
        out = []
        for ref, name in self._params.values():
            p = ref()
            if p is not None:
                out.append((name, p))
        return out

    def root_modules(self) -> list[Any]:
        return [m for m in (r() for r in self.roots) if m is not None]
