"""The script's variables that may hold tensors: the candidates the memory watcher looks at once graphs of
several steps are held at once or memory grows (locals and globals of the script's frames, one level of
attributes), the bytes of their tensors, the steps their graphs reach, and the line that adds to them.
"""

from __future__ import annotations

import gc
import linecache
import re
import sys
from collections import deque
from typing import Any, Iterator

from torchpact.watch.frames import is_user_file, user_frames

def _script_file(path: str | None) -> bool:
    """The script's own code: a user file (see frames.is_user_file) outside installed packages."""
    return bool(path) and is_user_file(path) and "site-packages" not in path and "dist-packages" not in path


def script_frames() -> list[Any]:
    """Frames of the script on the stack, innermost first (library and torchpact frames left out)."""
    return [f for f in user_frames() if _script_file(f.f_code.co_filename)]


class Holder:
    """A variable of the script (or an attribute of one) that may hold tensors."""

    __slots__ = ("label", "value", "frame_code", "path", "is_global")

    def __init__(self, label: str, value: Any, frame_code: Any, path: str, is_global: bool) -> None:
        self.label = label
        self.value = value
        self.frame_code = frame_code
        self.path = path
        self.is_global = is_global


CONTAINERS = (list, tuple, dict, deque, set)


def _interesting(value: Any) -> bool:
    import torch

    return isinstance(value, (torch.Tensor, *CONTAINERS))


def _user_class(value: Any) -> bool:
    """An instance of a class defined in the script (a trainer, a config object), not a library type."""
    cls = type(value)
    module = sys.modules.get(cls.__module__)
    path = getattr(module, "__file__", None) or ""
    if cls.__module__ == "__main__":
        return True
    return _script_file(path)


def find_holders(frames: list[Any], roots: list[Any]) -> list[Holder]:
    """Candidate holders: locals and globals of the script's frames, one level of attributes of the
    objects of the script's own classes among them (``self.history``), and the attributes of every
    submodule of the models."""
    import torch.nn as nn

    out: list[Holder] = []
    seen_objs: set[int] = set()
    seen_values: set[int] = set()

    def add(label: str, value: Any, code: Any, path: str, is_global: bool) -> None:
        if id(value) not in seen_values:
            seen_values.add(id(value))
            out.append(Holder(label, value, code, path, is_global))

    def attributes(prefix: str, obj: Any, code: Any, path: str, is_global: bool) -> None:
        if id(obj) in seen_objs:
            return
        seen_objs.add(id(obj))
        if isinstance(obj, nn.Module):
            for mname, mod in obj.named_modules():
                if mod is not obj and id(mod) in seen_objs:
                    continue
                seen_objs.add(id(mod))
                for attr, value in vars(mod).items():
                    if not attr.startswith("_") and _interesting(value):
                        add(".".join(p for p in (prefix, mname, attr) if p), value, code, path, is_global)
            return
        try:
            attrs = list(vars(obj).items())[:200]
        except TypeError:
            return
        for attr, value in attrs:
            if not attr.startswith("__") and _interesting(value):
                add(f"{prefix}.{attr}", value, code, path, is_global)

    done_globals: set[int] = set()
    for frame in frames:
        code = frame.f_code
        path = code.co_filename
        local = frame.f_locals
        is_module = local is frame.f_globals
        scopes: list[tuple[dict, bool]] = [(local, is_module)]
        if not is_module and id(frame.f_globals) not in done_globals:
            scopes.append((frame.f_globals, True))
        for scope, is_global in scopes:
            if is_global:
                if id(scope) in done_globals:
                    continue
                done_globals.add(id(scope))
            for name, value in list(scope.items()):
                if name.startswith("__"):
                    continue
                if _interesting(value):
                    add(name, value, code, path, is_global)
                elif isinstance(value, nn.Module) or (not isinstance(value, type) and _user_class(value)):
                    attributes(name, value, code, path, is_global)
        if not is_module and sys.version_info < (3, 13) and code.co_flags & 0x1:  # CO_OPTIMIZED
            # On 3.11/3.12 reading f_locals leaves a snapshot dict on the frame that keeps every local
            # alive until the function returns: drop it, so no tensor outlives the script's own `del`.
            local.clear()
        del local
    for root in roots:
        attributes(type(root).__name__, root, None, "", True)
    return out


def _items(value: Any, limit: int = 16) -> list[Any]:
    """A sample of a container's items: the first and the last ``limit // 2``."""
    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, (set, frozenset)):
        items = list(value)
    else:
        items = list(value)
    if len(items) <= limit:
        return items
    return items[: limit // 2] + items[-(limit // 2):]


def flat_tensors(value: Any, depth: int = 0) -> Iterator[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 2 and isinstance(value, CONTAINERS):
        for item in _items(value):
            yield from flat_tensors(item, depth + 1)


def reached_steps(tensor: Any, seqs: dict[int, int], budget: int = 20000) -> set[int]:
    """Steps whose marked nodes the graph of ``tensor`` reaches (a bounded walk over ``next_functions``)."""
    fn = getattr(tensor, "grad_fn", None)
    if fn is None:
        return set()
    found: set[int] = set()
    seen = {fn}
    todo = [fn]
    while todo and budget > 0:
        node = todo.pop()
        budget -= 1
        try:
            step = seqs.get(node._sequence_nr())
        except Exception:
            step = None
        if step is not None:
            found.add(step)
        try:
            nexts = node.next_functions
        except Exception:
            continue
        for nxt, _ in nexts:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return found


def tensor_bytes(tensors: Iterator[Any], seen: set[int] | None = None) -> int:
    seen = set() if seen is None else seen
    total = 0
    for t in tensors:
        try:
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key in seen or key == 0:
                continue
            seen.add(key)
            total += storage.nbytes()
        except Exception:
            continue
    return total


def all_tensor_bytes(device_type: str) -> int:
    """Bytes of the storages of every tensor Python can see (one ``gc.get_objects()`` pass)."""
    import torch

    is_tensor: dict[type, bool] = {}
    seen: set[int] = set()
    total = 0
    for obj in gc.get_objects():
        cls = type(obj)  # not isinstance: some lazy module attributes warn when their __class__ is read
        flag = is_tensor.get(cls)
        if flag is None:
            flag = is_tensor[cls] = issubclass(cls, torch.Tensor)
        if not flag:
            continue
        try:
            if obj.device.type != device_type:
                continue
        except Exception:
            continue
        total += tensor_bytes(iter((obj,)), seen)
    return total


_WRITE_PATTERNS = (
    r"\b{n}\s*\.\s*(append|extend|insert|appendleft|add|update|setdefault)\s*\(",
    r"\b{n}\s*\[[^\]]*\]\s*=[^=]",
    r"\b{n}\s*\+=",
    r"\b{n}\s*=\s*{n}\s*\+",
    r"\b{n}\s*=.*\b(cat|stack|concatenate|hstack|vstack)\s*\(.*\b{n}\b",
)


def write_line(holder: Holder) -> int | None:
    """The line of the script that adds to ``holder`` (``x.append(``, ``x +=``, ``x[k] =``), if found."""
    path = holder.path
    if not path:
        return None
    lines = linecache.getlines(path)
    if not lines:
        return None
    first, last = 1, len(lines)
    code = holder.frame_code
    if code is not None and not holder.is_global:
        linenos = [ln for _, _, ln in code.co_lines() if ln is not None]
        if linenos:
            first, last = min(linenos), max(linenos)
    name = re.escape(holder.label)
    for pattern in _WRITE_PATTERNS:
        rx = re.compile(pattern.format(n=name))
        for i in range(first, last + 1):
            if rx.search(lines[i - 1]):
                return i
    return None


def holder_bytes(holders: list[Holder], device_type: str) -> dict[tuple[str, str], tuple[Holder, int]]:
    import torch

    out = {}
    for holder in holders:
        value = holder.value
        if isinstance(value, torch.Tensor):
            tensors = [value] if value.device.type == device_type else []
        else:
            tensors = [t for t in _all_items(value) if t.device.type == device_type]
        if tensors:
            out[(holder.path, holder.label)] = (holder, tensor_bytes(iter(tensors)))
    return out


def _all_items(value: Any) -> Iterator[Any]:
    """Every tensor in a container (one level of nesting), for counting bytes."""
    import torch

    items = value.values() if isinstance(value, dict) else value
    for item in list(items):
        if isinstance(item, torch.Tensor):
            yield item
        elif isinstance(item, (list, tuple)):
            for sub in item:
                if isinstance(sub, torch.Tensor):
                    yield sub
        elif isinstance(item, dict):
            for sub in item.values():
                if isinstance(sub, torch.Tensor):
                    yield sub
