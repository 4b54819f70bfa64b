"""Axis names from what the model is, not from where an axis sits.

:func:`~torchpact.audit.variants.infer_dims` guesses from positions: dim 0 is the batch, dim 1 of a
float ``(N, T, F)`` input is time. A model says otherwise through its modules: an ``nn.GRU`` /
``nn.LSTM`` / ``nn.RNN`` with ``batch_first=False`` (their default) takes ``(time, batch, features)``,
and a convolution takes ``(batch, channels, length)`` or ``(batch, channels, height, width)``, also
when the model permutes a channels-last input before it. One eager call on the example with
forward pre-hooks on those modules sees which input tensor each takes; an input whose shape is the
module's input (or its channels-last permutation) gets its axes named by the module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchpact.audit import _common as C
from torchpact.audit.variants import Dims, flatten_inputs


@dataclass
class Seen:
    """The first input one recurrent or convolution module was called with."""

    module: str  # the module's name in the model
    what: str  # e.g. "nn.GRU(batch_first=False)"
    shape: tuple[int, ...]
    names: dict[int, str]  # the module's input dim -> axis name
    orders: tuple[tuple[int, ...], ...]  # leaf dim for each module dim: as given, channels-last


def module_inputs(model: Any, args: tuple, kwargs: dict[str, Any]) -> list[Seen]:
    """The recurrent and convolution modules of ``model`` and the first input each was called with."""
    import torch
    from torch import nn

    seen: dict[str, Seen] = {}
    handles = []

    def hook(name: str, module: Any):
        def pre(mod: Any, inputs: tuple) -> None:
            x = inputs[0] if inputs else None
            if name in seen or not isinstance(x, torch.Tensor):
                return
            if isinstance(mod, nn.RNNBase) and x.dim() == 3:
                if mod.batch_first:
                    seen[name] = Seen(name, f"nn.{type(mod).__name__}(batch_first=True)", tuple(x.shape),
                                      {0: "batch", 1: "time"}, ((0, 1, 2),))
                else:
                    seen[name] = Seen(name, f"nn.{type(mod).__name__}(batch_first=False)", tuple(x.shape),
                                      {0: "time", 1: "batch"}, ((0, 1, 2),))
            elif isinstance(mod, nn.Conv1d) and x.dim() == 3:
                seen[name] = Seen(name, "nn.Conv1d", tuple(x.shape), {0: "batch", 2: "length"},
                                  ((0, 1, 2), (0, 2, 1)))
            elif isinstance(mod, nn.Conv2d) and x.dim() == 4:
                seen[name] = Seen(name, "nn.Conv2d", tuple(x.shape), {0: "batch", 2: "height", 3: "width"},
                                  ((0, 1, 2, 3), (0, 3, 1, 2)))
        return pre

    for name, module in model.named_modules():
        if isinstance(module, (nn.RNNBase, nn.Conv1d, nn.Conv2d)):
            handles.append(module.register_forward_pre_hook(hook(name, module)))
    try:
        with torch.no_grad(), C.quiet():
            model(*args, **kwargs)
    except Exception:
        return []  # eager itself fails on the example: eager_inputs reports it
    finally:
        for h in handles:
            h.remove()
    return list(seen.values())


def apply_layout(dims: Dims, args: tuple, kwargs: dict[str, Any], seen: list[Seen]) -> Dims:
    """``dims`` with the axes of every input a module takes as it is named by that module."""
    import torch

    leaves, _ = flatten_inputs(args, kwargs)
    in_list = set(dims.images.leaves) if dims.images else set()
    done: set[int] = set()
    for s in seen:
        for i, leaf in enumerate(leaves):
            if i in done or i in in_list or not isinstance(leaf, torch.Tensor) or not leaf.dtype.is_floating_point:
                continue
            order = next((o for o in s.orders if leaf.dim() == len(o)
                          and tuple(leaf.shape[o[k]] for k in range(len(o))) == s.shape), None)
            if order is None:
                continue
            done.add(i)
            _rename(dims, i, {order[k]: name for k, name in s.names.items()}, leaf, s)
            break
    return dims


def _rename(dims: Dims, leaf_index: int, names: dict[int, str], leaf: Any, s: Seen) -> None:
    """Leaf ``leaf_index``'s dims named ``names`` (leaf dim -> name); a name the guess gave another
    size is the module's now, and the guess's other inputs lose it."""
    for name, (size, where) in list(dims.dims.items()):
        kept = [(i, d) for i, d in where if i != leaf_index]
        if kept != where or name in names.values():
            if not kept:
                del dims.dims[name]
                dims.candidates.discard(name)
            else:
                dims.dims[name] = (size, kept)
    for d, name in sorted(names.items()):
        size = int(leaf.shape[d])
        if name in dims.dims and dims.dims[name][0] == size:
            dims.dims[name] = (size, dims.dims[name][1] + [(leaf_index, d)])
        else:
            dims.dims[name] = (size, [(leaf_index, d)])
            if name != "batch":
                dims.candidates.add(name)  # eager still has to accept other sizes along it
        dims.layout[name] = f"{s.module or 'the model'} is {s.what}, which takes dim {d} as the {name}"
