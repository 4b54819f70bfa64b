"""Runtime watchers: observe an unmodified training script through torch's global hooks.

``with torchpact.watch() as w: train()`` then ``w.findings``. Watchers are discovered in
``torchpact.watch.watchers``; nothing is registered by hand. torch is imported lazily.
"""

from __future__ import annotations

import importlib
import sys
import pkgutil
from functools import lru_cache
from typing import Iterable

from torchpact.watch.session import Sampler, Session
from torchpact.watch.watcher import Check, Watcher


def watcher_classes() -> tuple[type[Watcher], ...]:
    """Every watcher class, by name."""
    return _discover(default_only=False)


@lru_cache(maxsize=2)
def _discover(default_only: bool) -> tuple[type[Watcher], ...]:
    """The watcher classes of ``torchpact.watch.watchers``, by name; with ``default_only``, without
    importing the modules of watchers that are off by default (``OFF_BY_DEFAULT``)."""
    import torchpact.watch.watchers as package

    found: dict[str, type[Watcher]] = {}
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        short = info.name.rsplit(".", 1)[-1]
        if short.startswith("_") or (default_only and short in package.OFF_BY_DEFAULT):
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (isinstance(obj, type) and issubclass(obj, Watcher) and obj is not Watcher
                    and obj.__module__ == module.__name__):
                if obj.name in found:
                    raise RuntimeError(f"two watchers are named {obj.name!r}")
                found[obj.name] = obj
    return tuple(found[n] for n in sorted(found))


def all_checks() -> dict[str, Check]:
    """Every runtime check by code (a code may be shared with a lint rule)."""
    out: dict[str, Check] = {}
    for cls in watcher_classes():
        for check in cls.checks:
            out[check.code] = check
    return out


def make_watchers(names: Iterable[str] | None = None) -> list[Watcher]:
    """Instances of the named watchers (default: those enabled by default)."""
    if names is None:
        return [c() for c in _discover(default_only=True) if c.enabled_by_default]
    classes = watcher_classes()
    wanted = set(names)
    unknown = wanted - {c.name for c in classes}
    if unknown:
        raise ValueError(f"unknown watcher(s): {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(c.name for c in classes)}")
    return [c() for c in classes if c.name in wanted]


def watch(watchers: Iterable[str] | Iterable[Watcher] | None = None, *, sampler: Sampler | None = None,
          live: bool = False, **session_options) -> Session:
    """A session to use as a context manager: hooks on enter, removed on exit (also on error)."""
    items = list(watchers) if watchers is not None else None
    if items is not None and all(isinstance(w, Watcher) for w in items):
        instances = items  # type: ignore[assignment]
    else:
        instances = make_watchers(items)  # type: ignore[arg-type]
    return Session(instances, sampler=sampler, live=live, **session_options)


class _CallableModule(type(sys)):
    """``torchpact.watch`` is both this package and the function: importing the package replaces the
    facade's attribute, so the package itself answers ``torchpact.watch(...)``."""

    def __call__(self, *args, **kwargs) -> Session:
        return watch(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["Check", "Sampler", "Session", "Watcher", "all_checks", "make_watchers", "watch", "watcher_classes"]
