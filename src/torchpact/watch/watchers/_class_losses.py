"""Every class-index loss torch computes through ``F.cross_entropy`` / ``F.nll_loss``, wrapped once for the
watchers that look at them.

``nn.CrossEntropyLoss`` and ``nn.NLLLoss`` call these two functions with their ``weight``,
``ignore_index`` and ``reduction`` spelled out, so the module form passes here too, as do model heads
that compute their own loss. A listener is ``(wants, hear, failed)``: ``wants()`` is asked first, on
every call (keep it O(1): an attribute test); only when some listener wants the call are its arguments
parsed into a ``LossCall`` and handed to ``hear(call)``, after torch computed the loss. A listener that
raises is dropped and told through ``failed(exc)``: the script never sees a watcher's error. A forked
DataLoader worker inherits the wrapper; it only passes through there. While dynamo or the JIT traces,
the wrapper calls torch's own function.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from torchpact.watch.watchers._patch import Patch, remove_all, unpatched

Wants = Callable[[], bool]
Hear = Callable[["LossCall"], None]
Failed = Callable[[Exception], None]

# F.<name>: its positional parameters after (input, target), as torch 2.13 declares them
_POSITIONAL = {
    "cross_entropy": ("weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing"),
    "nll_loss": ("weight", "size_average", "ignore_index", "reduce", "reduction"),
}
_DEFAULTS = {"weight": None, "size_average": None, "ignore_index": -100, "reduce": None, "reduction": "mean",
             "label_smoothing": 0.0}


class LossCall:
    """One call of a class-index loss: its tensors and the options that decide what it averages."""

    __slots__ = ("function", "input", "target", "weight", "ignore_index", "reduction", "label_smoothing", "loss")

    def __init__(self, function: str, input: Any, target: Any, options: dict, loss: Any) -> None:
        self.function = function          # "cross_entropy" or "nll_loss"
        self.input = input
        self.target = target
        self.weight = options["weight"]
        self.ignore_index = options["ignore_index"]
        self.reduction = options["reduction"]
        self.label_smoothing = options.get("label_smoothing", 0.0)
        self.loss = loss

    def label(self, session: Any) -> str:
        """``nn.CrossEntropyLoss`` when a torch loss module made the call, else ``F.cross_entropy``."""
        module = session.innermost_module()
        if module is not None and type(module).__module__ == "torch.nn.modules.loss":
            return f"nn.{type(module).__name__}"
        return f"F.{self.function}"

    def class_targets(self) -> bool:
        """Whether the target holds class indices (not probabilities) and the input has a class dim."""
        import torch

        return (isinstance(self.target, torch.Tensor) and isinstance(self.input, torch.Tensor)
                and not self.target.is_floating_point() and not self.target.is_complex()
                and self.input.dim() >= 1 and self.target.device.type != "meta")

    def classes(self) -> int:
        return int(self.input.shape[1] if self.input.dim() >= 2 else self.input.shape[0])


_listeners: list[tuple[Wants, Hear, Failed]] = []
_unsampled: dict[Hear, Wants] = {}
_patches: list[Patch] = []
_state = {"calling": False, "pid": 0}


def subscribe(wants: Wants, hear: Hear, failed: Failed, unsampled: Wants | None = None) -> None:
    """Hear the calls ``wants()`` asks for, from now until ``unsubscribe(hear)``. ``wants()`` is False on every
    unsampled step unless ``unsampled()`` says it may want one of those now (asked when unsampled steps
    begin: while no listener may, the wrapper is off torch for them, see ``Patches.rest``)."""
    if not any(p.active for p in _patches):  # none yet, or a closed session took them off (a watcher switched off
        _listeners.clear()                   # after a bug never unsubscribes): its listeners went with it
        _unsampled.clear()
        _patches.clear()
        _install()
    _listeners.append((wants, hear, failed))
    if unsampled is not None:
        _unsampled[hear] = unsampled


def _sampled_only() -> bool:
    return not any(may() for may in _unsampled.values())


def unsubscribe(hear: Hear) -> None:
    _listeners[:] = [entry for entry in _listeners if entry[1] != hear]  # (bound methods: equal, not identical)
    _unsampled.pop(hear, None)
    if not _listeners:
        remove_all(_patches)


def original(name: str) -> Callable:
    """``torch.nn.functional.<name>`` as torch defines it, whatever wraps it now (a probe calls this one)."""
    import torch.nn.functional as F

    return unpatched(F, name)


def _options(name: str, args: tuple, kwargs: dict) -> dict:
    options = dict(_DEFAULTS)
    for key, value in zip(_POSITIONAL[name], args, strict=False):  # the positional arguments given, fewer or all
        options[key] = value
    for key in _POSITIONAL[name]:
        if key in kwargs:
            options[key] = kwargs[key]
    if options["size_average"] is not None or options["reduce"] is not None:  # the legacy pair decides
        from torch.nn import _reduction

        options["reduction"] = _reduction.legacy_get_string(options["size_average"], options["reduce"],
                                                            emit_warning=False)
    return options


def _wrap(name: str) -> Callable[[Callable], Callable]:
    def make(fn: Callable) -> Callable:
        def loss(input: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
            out = fn(input, target, *args, **kwargs)
            if _state["calling"] or os.getpid() != _state["pid"]:
                return out
            wanted = [entry for entry in _listeners if entry[0]()]
            if not wanted:
                return out
            import torch

            if torch._C._get_tracing_state() is not None:
                return out
            _state["calling"] = True  # a listener's own tensor ops must not come back here
            try:
                for _, hear, failed in wanted:
                    try:
                        hear(LossCall(name, input, target, _options(name, args, kwargs), out))
                    except Exception as exc:  # a watcher bug must never reach the script
                        unsubscribe(hear)
                        failed(exc)
            finally:
                _state["calling"] = False
            return out
        return loss
    return make


def _install() -> None:
    import torch.nn.functional as F

    _state["pid"] = os.getpid()
    for name in _POSITIONAL:
        _patches.append(Patch(F, name, _wrap(name), sampled_only=_sampled_only))
