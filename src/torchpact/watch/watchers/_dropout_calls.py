"""Every dropout torch applies through its Python entry points, wrapped once for all the watchers that look.

Wrapped (O(1) per call: an argument test): ``F.dropout`` / ``dropout1d`` / ``dropout2d`` / ``dropout3d`` /
``alpha_dropout`` / ``feature_alpha_dropout``, ``torch.dropout`` / ``feature_dropout`` / ``alpha_dropout`` /
``feature_alpha_dropout`` and ``F.scaled_dot_product_attention``. ``nn.Dropout`` and its variants call
``F.<name>(input, self.p, self.training, ...)`` and ``nn.MultiheadAttention`` calls ``F.dropout`` or
``F.scaled_dot_product_attention``, so module dropout passes here too.

A call *drops units* when its probability is above 0 and its mode argument is true. What torch 2.13 takes as
the mode: ``training=`` for the ``F.`` functions, which defaults to True for ``dropout`` and its 1d/2d/3d
forms and to False for ``alpha_dropout`` / ``feature_alpha_dropout``; ``train``, a required argument, for
the ``torch.`` functions; nothing for ``scaled_dot_product_attention``, which applies ``dropout_p`` in every
mode. Listeners hear only calls that drop units, as ``listener(function, p, mode_given, frame)``:
``mode_given`` says whether the caller passed the mode (False for a defaulted ``training`` and for SDPA),
``frame`` is the caller's frame.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchpact.watch.watchers._patch import Patch, caller_frame, remove_all

Listener = Callable[[str, float, bool, Any], None]

# F.<name> -> the default of its `training` argument on torch 2.13
FUNCTIONAL = {"dropout": True, "dropout1d": True, "dropout2d": True, "dropout3d": True,
              "alpha_dropout": False, "feature_alpha_dropout": False}
TORCH = ("dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout")

_listeners: list[Listener] = []
_patches: list[Patch] = []


def subscribe(listener: Listener) -> None:
    """Hear every call that drops units, from now until ``unsubscribe``."""
    if not any(p.active for p in _patches):  # none yet, or a closed session took them off (a watcher switched off
        _listeners.clear()                   # after a bug never unsubscribes): its listeners went with it
        _patches.clear()
        _install()
    _listeners.append(listener)


def unsubscribe(listener: Listener) -> None:
    if listener in _listeners:
        _listeners.remove(listener)
    if not _listeners:
        remove_all(_patches)


def _tell(function: str, p: Any, mode_given: bool) -> None:
    frame = caller_frame(1)  # (_tell is a helper of the patch's function)
    for listener in tuple(_listeners):
        listener(function, float(p), mode_given, frame)


def _functional(name: str, default: bool) -> Callable[[Callable], Callable]:
    label = f"F.{name}"

    def make(original: Callable) -> Callable:
        def dropout(input: Any, *args: Any, **kwargs: Any) -> Any:
            if len(args) > 1:
                training, given = args[1], True
            elif "training" in kwargs:
                training, given = kwargs["training"], True
            else:
                training, given = default, False
            if training:
                p = args[0] if args else kwargs.get("p", 0.5)
                if isinstance(p, (int, float)) and p > 0:
                    _tell(label, p, given)
            return original(input, *args, **kwargs)
        return dropout
    return make


def _aten(name: str) -> Callable[[Callable], Callable]:
    label = f"torch.{name}"

    def make(original: Callable) -> Callable:
        def dropout(input: Any, *args: Any, **kwargs: Any) -> Any:
            train = args[1] if len(args) > 1 else kwargs.get("train")
            if train:
                p = args[0] if args else kwargs.get("p")
                if isinstance(p, (int, float)) and p > 0:
                    _tell(label, p, True)
            return original(input, *args, **kwargs)
        return dropout
    return make


def _sdpa(original: Callable) -> Callable:
    def scaled_dot_product_attention(*args: Any, **kwargs: Any) -> Any:
        p = args[4] if len(args) > 4 else kwargs.get("dropout_p", 0.0)
        if isinstance(p, (int, float)) and p > 0:
            _tell("F.scaled_dot_product_attention", p, False)
        return original(*args, **kwargs)
    return scaled_dot_product_attention


def _install() -> None:
    import torch
    import torch.nn.functional as F

    for name, default in FUNCTIONAL.items():
        if hasattr(F, name):
            _patches.append(Patch(F, name, _functional(name, default)))
    for name in TORCH:
        if hasattr(torch, name):
            _patches.append(Patch(torch, name, _aten(name)))
    _patches.append(Patch(F, "scaled_dot_product_attention", _sdpa))
