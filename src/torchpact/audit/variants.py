"""Input variants that expose specialisation: other batch sizes, sequence lengths and values.

From the example inputs the dimensions that probably vary are inferred: a *batch* dimension (dim 0
shared by the inputs of two or more dimensions) and, when integer (token) inputs are present, a
*sequence* dimension (their dim 1, and dim 1 of every input of that length). Shape variants keep the
example's values (rows and positions are repeated cyclically), so a difference they show comes from
the shape alone; value variants keep the shape. Masks (integer, bool or float inputs holding only 0
and 1) keep their values in the value variants.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

EXAMPLE, SHAPE, VALUE = "example", "shape", "value"


@dataclass
class Dims:
    """The inferred varying dimensions: name -> (example size, [(leaf index, dim), ...])."""

    dims: dict[str, tuple[int, list[tuple[int, int]]]] = field(default_factory=dict)

    def of_leaf(self, index: int) -> dict[int, str]:
        """dim -> name for one flattened input."""
        return {d: name for name, (_, where) in self.dims.items() for i, d in where if i == index}

    def describe(self) -> dict[str, int]:
        return {name: size for name, (size, _) in self.dims.items()}


@dataclass
class Variant:
    """One set of inputs: ``kind`` is example / shape / value."""

    name: str
    kind: str
    args: tuple
    kwargs: dict[str, Any]

    def tensors(self) -> list[Any]:
        import torch

        return [x for x in flatten_inputs(self.args, self.kwargs)[0] if isinstance(x, torch.Tensor)]


def flatten_inputs(args: tuple, kwargs: dict[str, Any]) -> tuple[list[Any], Any]:
    from torch.utils import _pytree

    return _pytree.tree_flatten((tuple(args), dict(kwargs)))


def _unflatten(leaves: list[Any], spec: Any) -> tuple[tuple, dict[str, Any]]:
    from torch.utils import _pytree

    args, kwargs = _pytree.tree_unflatten(leaves, spec)
    return tuple(args), dict(kwargs)


def _is_int(t: Any) -> bool:
    import torch

    return not t.dtype.is_floating_point and not t.dtype.is_complex and t.dtype is not torch.bool


def _is_mask(t: Any) -> bool:
    import torch

    if t.numel() == 0 or t.dtype.is_complex:
        return False
    if t.dtype is torch.bool:
        return True
    return bool(((t == 0) | (t == 1)).all())


def infer_dims(args: tuple, kwargs: dict[str, Any]) -> Dims:
    """The batch and sequence dimensions the example inputs suggest."""
    import torch

    leaves, _ = flatten_inputs(args, kwargs)
    tensors = [(i, t) for i, t in enumerate(leaves) if isinstance(t, torch.Tensor)]
    dims = Dims()
    multi = [(i, t) for i, t in tensors if t.dim() >= 2]
    if multi:
        batch = Counter(t.shape[0] for _, t in multi).most_common(1)[0][0]
        where = [(i, 0) for i, t in tensors if t.dim() >= 1 and t.shape[0] == batch]
        dims.dims["batch"] = (batch, where)
    tokens = [t for _, t in multi if _is_int(t) and not _is_mask(t)]
    if tokens:
        seq = Counter(t.shape[1] for t in tokens).most_common(1)[0][0]
        where = [(i, 1) for i, t in multi if t.shape[1] == seq]
        dims.dims["seq"] = (seq, where)
    return dims


def _resize(t: Any, dim: int, size: int) -> Any:
    import torch

    index = torch.arange(size, device=t.device) % t.shape[dim]
    return t.index_select(dim, index)


def _shape_variant(leaves: list[Any], spec: Any, dims: Dims, name: str, size: int, label: str) -> Variant:
    out = list(leaves)
    for i, d in dims.dims[name][1]:
        out[i] = _resize(out[i], d, size)
    return Variant(label, SHAPE, *_unflatten(out, spec))


def _value_variant(leaves: list[Any], spec: Any, label: str, fn: Any) -> Variant | None:
    import torch

    out, changed = list(leaves), False
    for i, t in enumerate(leaves):
        if isinstance(t, torch.Tensor) and t.numel() and not _is_mask(t):
            new = fn(t)
            if new is not None:
                out[i], changed = new, True
    return Variant(label, VALUE, *_unflatten(out, spec)) if changed else None


def make_variants(args: tuple, kwargs: dict[str, Any], dims: Dims | None = None, seed: int = 0) -> list[Variant]:
    """The example first, then shape variants, then value variants (each only where it differs)."""
    import torch

    leaves, spec = flatten_inputs(args, kwargs)
    dims = dims if dims is not None else infer_dims(args, kwargs)
    variants = [Variant(EXAMPLE, EXAMPLE, tuple(args), dict(kwargs))]
    if "batch" in dims.dims:
        b = dims.dims["batch"][0]
        for size in sorted({1, 2 * b + 1} - {b}):
            variants.append(_shape_variant(leaves, spec, dims, "batch", size, f"batch={size}"))
    if "seq" in dims.dims:
        s = dims.dims["seq"][0]
        for size in sorted({max(1, s // 2), 2 * s} - {s}):
            variants.append(_shape_variant(leaves, spec, dims, "seq", size, f"seq={size}"))

    gen = torch.Generator().manual_seed(seed)

    def floats(fn):
        return lambda t: fn(t) if t.dtype.is_floating_point else None

    def random(t):
        if t.dtype.is_floating_point:
            std = float(t.float().std()) if t.numel() > 1 else 1.0
            noise = torch.randn(t.shape, generator=gen).to(t.device, t.dtype)
            return noise * (std or 1.0) + t.float().mean().to(t.dtype)
        if _is_int(t):
            lo, hi = int(t.min()), int(t.max())
            return torch.randint(lo, hi + 1, t.shape, generator=gen, dtype=t.dtype).to(t.device)
        return None

    def lowest(t):
        return torch.full_like(t, int(t.min())) if _is_int(t) and int(t.min()) != int(t.max()) else None

    for label, fn in (("values x0.1", floats(lambda t: t * 0.1)), ("values x10", floats(lambda t: t * 10)),
                      ("values negated", floats(lambda t: -t)), ("values zero", floats(torch.zeros_like)),
                      ("random values", random), ("values lowest", lowest)):
        v = _value_variant(leaves, spec, label, fn)
        if v is not None:
            variants.append(v)
    return variants
