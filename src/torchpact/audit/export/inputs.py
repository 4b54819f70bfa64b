"""How an artifact takes the model's inputs: tensors positionally, the rest bound as constants, and
``Dim.AUTO`` on the inferred dims; readable names for the flattened inputs."""

from __future__ import annotations

import inspect
from typing import Any, Callable

from torchpact.audit.variants import Dims, Variant, flatten_inputs


def bind(model: Any, example: Variant) -> Any:
    """The model with the example's non-tensor inputs fixed, taking the tensors positionally."""
    import torch

    leaves, spec = flatten_inputs(example.args, example.kwargs)
    index = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]

    class Bound(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors):
            from torch.utils import _pytree

            if len(tensors) != len(index):
                raise ValueError(f"the artifact takes the example's input structure ({len(index)} tensors), "
                                 f"not {len(tensors)}")
            filled = list(leaves)
            for i, t in zip(index, tensors, strict=True):
                filled[i] = t
            args, kwargs = _pytree.tree_unflatten(filled, spec)
            return self.model(*args, **kwargs)

    return Bound()


def positional_only(example: Variant) -> bool:
    import torch

    return not example.kwargs and all(isinstance(a, torch.Tensor) for a in example.args)


def exportable(model: Any, example: Variant, dims: Dims) -> tuple[Any, tuple, Any, Callable[[Any, Variant], Any]]:
    """(module, args, dynamic_shapes, call) for torch.export / ONNX.

    Tensor-only positional inputs go to the model itself. Otherwise the model is wrapped so that only
    tensors are inputs and the rest (``use_cache=False``, ``return_dict=False``...) are constants of
    the graph: torch 2.13's dynamic_shapes matching fails on non-tensor values inside ``**kwargs``.
    ``Dim.AUTO`` marks the inferred batch/sequence dimensions.
    """
    from torch.export import Dim

    tensors = example.tensors()
    specs = []
    leaf_of = tensor_leaf_indices(example)
    for i in leaf_of:
        marked = dims.of_leaf(i)
        specs.append({d: Dim.AUTO for d in marked} or None)
    if positional_only(example):
        return model, tuple(example.args), (tuple(specs) if dims.dims else None), lambda m, v: m(*v.args)
    return (bind(model, example), tuple(tensors), ((tuple(specs),) if dims.dims else None),
            lambda m, v: m(*v.tensors()))


def tensor_leaf_indices(example: Variant) -> list[int]:
    import torch

    leaves, _ = flatten_inputs(example.args, example.kwargs)
    return [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]


def input_names(model: Any, example: Variant) -> list[str]:
    """A readable name per flattened input leaf: the forward parameter (``input_ids``,
    ``attention_mask``), with the path inside it for nested inputs."""
    from torch.utils import _pytree

    try:
        params = [p.name for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = []
    for path, _ in _pytree.tree_flatten_with_path((tuple(example.args), dict(example.kwargs)))[0]:
        top, rest = path[0].idx, path[1:]
        if top == 0:
            i = rest[0].idx
            base = params[i] if i < len(params) else f"args[{i}]"
        else:
            base = str(rest[0].key)
        names.append(base + "".join(str(k) for k in rest[1:]))
    return names
