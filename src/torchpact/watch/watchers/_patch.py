"""Temporary wrappers around torch functions the global hooks cannot see (``nn.init``, clipping, ...).

Several watchers may wrap the same attribute, and they are removed in any order: each wrapper only
passes through once removed, and the original attribute is put back when the last wrapper of it is
gone. The session owns the registry of its patches (``Patches``) and closes it last, which removes any
patch still on, so a closed session leaves torch exactly as it found it, also after the script crashed
or a watcher was switched off.

A wrapper must be invisible to torch's compilers and tracers, since the script's code reaches it through
the patched attribute (``F.dropout`` in a module's ``forward``):

- ``torch.jit.script`` resolves a Python function by compiling its source with the globals of the module
  it was defined in; through ``functools.wraps`` it would read the original's source with the wrapper's
  globals ("undefined value has_torch_function_unary"). Wrapping a Python function, the wrapper carries
  the two attributes torch's own ``torch.jit._script_if_tracing`` wrappers carry, which make
  ``torch.jit.script`` compile ``__original_fn`` instead and Dynamo trace it instead. Wrapping a builtin
  (``torch.dropout``, ``F.scaled_dot_product_attention``), the wrapper is registered as the same
  TorchScript builtin op as the original (``torch.jit._builtins``) for as long as it lives.
- While a tracer or compiler runs the code (``watch.tracing``), the wrapper calls through to what it
  wraps and its watcher sees nothing. Around torch's tracers that the session can see start and end
  (``watch.tracer_pause``), ``pause_all()`` puts torch's own functions back: a wrapper's frame on the stack
  would still rename the values a TorchScript trace records (it names them after the locals of the frame
  that called the op), and an FX graph would hold the wrapper as its node's target.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import weakref
from collections.abc import Callable, Iterator
from types import CodeType, FrameType
from typing import Any

from torchpact.userframes import passes_through
from torchpact.watch.tracing import traced

# id -> code of Patch's wrapper and of every function a patch wraps around its original (by id: a code object's
# hash reads all of its bytecode and constants, and caller_frame asks at every dropout call)
_CHAIN: dict[int, CodeType] = {}


class Patches:
    """The patches made while one session is open, and what they replaced: ``open_patches()`` makes the registry
    the one new patches join, ``close()`` removes every patch of it still on (a watcher switched off after a bug
    never gets to remove its own), so a closed session leaves torch as it found it, whatever the script did."""

    def __init__(self) -> None:
        # (id(owner), attr) -> (owner, what the attribute held before the first patch, the patches on it)
        self.originals: dict[tuple[int, str], tuple[Any, Any, list[Patch]]] = {}
        self.paused: list[dict[tuple[int, str], Any]] = []   # per pause_all() not yet resumed: the wrappers taken off
        self.resting: set[tuple[int, str]] = set()   # attributes holding torch's own function for an unsampled stretch

    def rest(self, unsampled: bool) -> bool:
        """Between steps: on an unsampled step, torch's own function back in each attribute whose every patch is
        ``sampled_only`` (its wrappers would only pass through), so the script's calls cost what they cost
        without torchpact; on a sampled step the wrappers again. An attribute is only swapped while it holds
        what this registry put there: a wrapper someone else set on top stays, and ours under it pass through.
        A reference the script took to a wrapper keeps working: it passes through while its step is unsampled.
        False when nothing could be arranged (a tracer has paused every patch): ask again later."""
        if self.paused:
            return False
        for key, (owner, original, patches) in self.originals.items():
            if unsampled and all(p.sampled_only() for p in patches if p.active):
                if key not in self.resting and owner.__dict__.get(key[1]) is patches[-1].wrapper:
                    setattr(owner, key[1], original)
                    self.resting.add(key)
            else:
                self.wake(key)
        return True

    def wake(self, key: tuple[int, str]) -> None:
        """The wrappers back in an attribute that holds torch's own function for an unsampled stretch."""
        if key not in self.resting:
            return
        self.resting.discard(key)
        owner, original, patches = self.originals[key]
        if owner.__dict__.get(key[1]) is original:
            setattr(owner, key[1], patches[-1].wrapper)

    def close(self) -> None:
        if self in _open:
            _open.remove(self)
        for _, _, patches in list(self.originals.values()):
            for patch in list(patches):
                patch.remove()


_open: list[Patches] = []    # the registries of the sessions open now, innermost last
_outside = Patches()         # patches made while no session is open (a test's own)


def open_patches() -> Patches:
    """A new registry, which the patches made from now until its ``close()`` join."""
    registry = Patches()
    _open.append(registry)
    return registry


def unpatched(owner: Any, attr: str) -> Any:
    """What ``owner.attr`` held before any patch on it, or what it holds now when none is."""
    for registry in _registries():
        entry = registry.originals.get((id(owner), attr))
        if entry is not None:
            return entry[1]
    return getattr(owner, attr)


def _registries() -> list[Patches]:
    """Every registry, outermost first."""
    return [_outside, *_open]


class Patch:
    """``owner.attr`` replaced by ``make(original)``; ``remove()`` undoes it (idempotent).

    While torch traces or compiles (``torch.compile``, ``torch.export``, ``torch.jit.trace``, ``torch.fx``,
    ``torch.func``), the wrapper calls through, so their graphs are the ones torch builds without
    torchpact; ``torch.jit.script`` compiles the original (see the module's docs).
    """

    def __init__(self, owner: Any, attr: str, make: Callable[[Callable], Callable],
                 sampled_only: bool | Callable[[], bool] = False) -> None:
        """``sampled_only``: the wrapper does nothing but pass through on an unsampled step (or, as a callable
        asked at each switch to unsampled steps, whether it does now), so the registry may take it off for
        those steps (``Patches.rest``)."""
        key = (id(owner), attr)
        registry = self._registry = _open[-1] if _open else _outside
        originals = registry.originals
        if key not in originals:
            originals[key] = (owner, owner.__dict__.get(attr, getattr(owner, attr)), [])
        self._key = key
        self.active = True
        self.sampled_only: Callable[[], bool] = sampled_only if callable(sampled_only) else (
            _always if sampled_only else _never)
        registry.wake(key)  # made on an unsampled step: the wrappers back first, to wrap around them
        previous = getattr(owner, attr)
        inner = make(previous)

        @functools.wraps(previous)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.active and not traced():
                return inner(*args, **kwargs)
            return previous(*args, **kwargs)

        _compile_as(wrapper, originals[key][1])
        passes_through(wrapper)
        passes_through(inner)
        _CHAIN.update((id(c), c) for c in (wrapper.__code__, getattr(inner, "__code__", None)) if c is not None)
        originals[key][2].append(self)
        self.wrapper = wrapper
        setattr(owner, attr, wrapper)

    def remove(self) -> None:
        if not self.active:
            return
        self.active = False
        originals = self._registry.originals
        entry = originals.get(self._key)
        if entry is not None and not any(p.active for p in entry[2]):
            owner, original, _ = originals.pop(self._key)
            self._registry.resting.discard(self._key)
            setattr(owner, self._key[1], original)


def _always() -> bool:
    return True


def _never() -> bool:
    return False


def caller_frame(depth: int = 0) -> FrameType | None:
    """The frame that called the patched attribute whose wrapped function is running (asking from it or from a
    helper it calls): the one above the wrapper that called it and above any other patches' wrappers and
    functions stacked on the same attribute. The function a patch makes must call its ``original`` itself.

    ``depth``, the frames between the asker and that function (0: the function asks, 1: a helper it calls), saves
    walking up to the wrapper on a call made for every module call (dropout); a wrong one only costs the walk."""
    try:
        frame: FrameType | None = sys._getframe(depth + 2)
    except ValueError:
        frame = None
    if frame is None or frame.f_code is not _WRAPPER_CODE:
        frame = sys._getframe(1)
        while frame is not None and frame.f_code is not _WRAPPER_CODE:
            frame = frame.f_back
    while frame is not None and id(frame.f_code) in _CHAIN:
        frame = frame.f_back
    return frame


def pause_all() -> None:
    """Put torch's own function back in every patched attribute, until ``resume_all()`` (calls nest)."""
    for registry in reversed(_registries()):  # innermost first: an outer registry's original is torch's own
        taken: dict[tuple[int, str], Any] = {}
        if not registry.paused:
            for key, (owner, original, _) in registry.originals.items():
                taken[key] = owner.__dict__.get(key[1])
                setattr(owner, key[1], original)
        registry.paused.append(taken)


def resume_all() -> None:
    """Undo the matching ``pause_all()``: the wrappers are back, but for patches removed meanwhile."""
    for registry in _registries():  # outermost first: the reverse of pause_all
        if not registry.paused:
            continue
        for key, wrapper in registry.paused.pop().items():
            entry = registry.originals.get(key)
            if entry is not None and wrapper is not None:
                setattr(entry[0], key[1], wrapper)


_WRAPPER_CODE = next(c for c in Patch.__init__.__code__.co_consts if isinstance(c, CodeType) and c.co_name == "wrapper")


def _compile_as(wrapper: Callable, original: Any) -> None:
    """Make TorchScript and Dynamo compile ``original`` where the script's code calls ``wrapper``."""
    # Dynamo traces a function's `_torchdynamo_inline` in its place, and reads it when it builds its tables of
    # torch's functions by name (`torch.dropout` must be found as the builtin it is)
    setattr(wrapper, "_torchdynamo_inline", original)  # noqa: B010 - a Callable has no such attribute for mypy
    if inspect.isfunction(original):
        # the attributes of torch.jit._script_if_tracing's wrapper, read by torch.jit.script and Dynamo
        setattr(wrapper, "__script_if_tracing_wrapper", True)
        setattr(wrapper, "__original_fn", original)
        return
    try:
        from torch.jit import _builtins
    except ImportError:  # pragma: no cover - a torch without TorchScript
        return
    op = _builtins._find_builtin(original)
    if op is not None:
        table = _builtins._get_builtin_table()
        table[id(wrapper)] = op
        # keyed by id: the entry must go with the wrapper (held by an FX graph or an import, it may outlive the patch)
        weakref.finalize(wrapper, table.pop, id(wrapper), None)


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Every wrapper passes straight through inside (torchpact's own run of a model on the side)."""
    active = [p for registry in _registries() for entry in list(registry.originals.values()) for p in entry[2]
              if p.active]
    for p in active:
        p.active = False
    try:
        yield
    finally:
        for p in active:
            p.active = True


def parameter_list(parameters: Any) -> list[Any]:
    """The ``parameters`` argument of a torch function that takes one tensor or an iterable of them, as a
    list: a generator (``model.parameters()``) can be read only once, by the wrapper or by the original."""
    import torch

    return [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)


def remove_all(patches: list[Patch]) -> None:
    while patches:
        patches.pop().remove()
