"""Input variants that expose specialisation: other batch sizes, sequence lengths, image sizes and values.

From the example inputs the dimensions that probably vary are inferred: a *batch* dimension (dim 0
shared by the inputs of two or more dimensions) and, when integer (token) inputs are present, a
*sequence* dimension (their dim 1, and dim 1 of every input of that length). Without token inputs,
float inputs of two or three dimensions get *candidate* time axes: ``time`` (dim 1: ``(N, T, F)``
features of an RNN, ``(N, L)`` raw audio) and ``length`` (dim 2 of ``(N, C, L)``), and float
``(N, C, H, W)`` image batches candidate ``height`` and ``width`` axes (dims 2 and 3, each varied on
its own). A candidate is kept only when eager accepts another size along it (:meth:`Dims.accepted`),
so the feature or channel axis of a model, or the size a ViT's position embeddings fix, is never
called dynamic. A list of images (``[3, H, W]`` tensors, as
detection models take) is varied in the number of images and in image size; its channels are never
taken for a batch. Shape variants keep the example's values (rows and positions are repeated
cyclically), so a difference they show comes from the shape alone; value variants keep the shape.
Masks (integer, bool or float inputs holding only 0 and 1) keep their values in the value variants.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

EXAMPLE, SHAPE, VALUE = "example", "shape", "value"


@dataclass
class ImageList:
    """A list (or tuple) of ``[C, H, W]`` images among the inputs: where it is and how many."""

    where: tuple[str, Any]  # ("arg", index) or ("kwarg", name)
    count: int
    leaves: list[int]  # flattened leaf index of each image


@dataclass
class Dims:
    """The inferred varying dimensions: name -> (example size, [(leaf index, dim), ...]).

    ``candidates`` are names kept only if eager accepts another size along them; ``images`` is the
    image list, when the inputs hold one (its ``height`` / ``width`` are in ``dims``).
    """

    dims: dict[str, tuple[int, list[tuple[int, int]]]] = field(default_factory=dict)
    candidates: set[str] = field(default_factory=set)
    images: ImageList | None = None
    layout: dict[str, str] = field(default_factory=dict)  # name -> the module whose layout named it
    smallest: dict[str, int] = field(default_factory=dict)  # name -> the smallest size eager accepts

    def of_leaf(self, index: int) -> dict[int, str]:
        """dim -> name for one flattened input."""
        return {d: name for name, (_, where) in self.dims.items() for i, d in where if i == index}

    def describe(self) -> dict[str, int]:
        out = {name: size for name, (size, _) in self.dims.items()}
        if self.images is not None:
            out["images"] = self.images.count
        return out

    def accepted(self, valid: list[Variant]) -> Dims:
        """These dims without the candidates along which eager accepted no other size."""
        varied = {v.dim for v in valid if v.dim}
        kept = {n: d for n, d in self.dims.items() if n not in self.candidates or n in varied}
        return Dims(kept, self.candidates & set(kept), self.images,
                    {n: why for n, why in self.layout.items() if n in kept}, dict(self.smallest))


@dataclass
class Variant:
    """One set of inputs: ``kind`` is example / shape / value."""

    name: str
    kind: str
    args: tuple
    kwargs: dict[str, Any]
    dim: str | None = None  # the dimension a shape variant varies

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


def _image_list(args: tuple, kwargs: dict[str, Any]) -> ImageList | None:
    """The first top-level list/tuple input made only of float ``[C, H, W]`` tensors."""
    import torch

    places = [(("arg", i), a) for i, a in enumerate(args)] + [(("kwarg", k), v) for k, v in kwargs.items()]
    leaf = 0
    for where, value in places:
        n = len(flatten_inputs((value,), {})[0])
        if (isinstance(value, (list, tuple)) and value and all(
                isinstance(t, torch.Tensor) and t.dim() == 3 and t.dtype.is_floating_point for t in value)):
            return ImageList(where, len(value), list(range(leaf, leaf + len(value))))
        leaf += n
    return None


def infer_dims(args: tuple, kwargs: dict[str, Any]) -> Dims:
    """The batch, sequence (or candidate time) and image dimensions the example inputs suggest."""
    import torch

    leaves, _ = flatten_inputs(args, kwargs)
    dims = Dims(images=_image_list(args, kwargs))
    in_list = set(dims.images.leaves) if dims.images else set()
    tensors = [(i, t) for i, t in enumerate(leaves) if isinstance(t, torch.Tensor) and i not in in_list]
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
    else:
        floats = [(i, t) for i, t in multi if t.dtype.is_floating_point and t.dim() <= 3 and not _is_mask(t)]
        for name, d in (("time", 1), ("length", 2)):
            sized = [t.shape[d] for _, t in floats if t.dim() > d and t.shape[d] > 1]
            if sized:
                size = Counter(sized).most_common(1)[0][0]
                dims.dims[name] = (size, [(i, d) for i, t in multi if 3 >= t.dim() > d and t.shape[d] == size
                                          and (d == 1 or t.dim() == 3)])
                dims.candidates.add(name)
        if dims.images is None:
            pictures = [(i, t) for i, t in multi if t.dtype.is_floating_point and t.dim() == 4 and not _is_mask(t)]
            for name, d in (("height", 2), ("width", 3)):
                sized = [t.shape[d] for _, t in pictures if t.shape[d] > 1]
                if sized:
                    size = Counter(sized).most_common(1)[0][0]
                    dims.dims[name] = (size, [(i, d) for i, t in pictures if t.shape[d] == size])
                    dims.candidates.add(name)
    if dims.images:
        first = leaves[dims.images.leaves[0]]
        for name, d in (("height", 1), ("width", 2)):
            dims.dims[name] = (int(first.shape[d]), [(i, d) for i in dims.images.leaves])
    return dims


def _resize(t: Any, dim: int, size: int) -> Any:
    import torch

    index = torch.arange(size, device=t.device) % t.shape[dim]
    return t.index_select(dim, index)


def _shape_variant(leaves: list[Any], spec: Any, dims: Dims, name: str, size: int, label: str) -> Variant:
    out = list(leaves)
    for i, d in dims.dims[name][1]:
        out[i] = _resize(out[i], d, size)
    return Variant(label, SHAPE, *_unflatten(out, spec), dim=name)


def shape_variant(args: tuple, kwargs: dict[str, Any], dims: Dims, name: str, size: int) -> Variant:
    """The example with dim ``name`` at ``size`` (its values repeated), named ``name=size``."""
    leaves, spec = flatten_inputs(args, kwargs)
    return _shape_variant(leaves, spec, dims, name, size, f"{name}={size}")


def edge_sizes(size: int, batch: bool = False) -> list[int]:
    """The sizes every real input distribution hits: 1 and 2, half the example (not for a batch),
    past twice and past four times the example; never the example's own."""
    sizes = {1, 2, 2 * size + 1, 4 * size + 1} | (set() if batch else {max(1, size // 2)})
    return sorted(sizes - {size})


def _image_variants(args: tuple, kwargs: dict[str, Any], images: ImageList) -> list[Variant]:
    """Other numbers of images (the example's repeated), and every image at half and twice its size."""
    kind, key = images.where
    value = args[key] if kind == "arg" else kwargs[key]

    def put(new: list[Any]) -> tuple[tuple, dict[str, Any]]:
        new = type(value)(new) if isinstance(value, tuple) else new
        if kind == "arg":
            return tuple(new if i == key else a for i, a in enumerate(args)), dict(kwargs)
        return tuple(args), {**kwargs, key: new}

    out = []
    n = images.count
    for size in sorted({1, 2 * n + 1} - {n}):
        out.append(Variant(f"images={size}", SHAPE, *put([value[k % n] for k in range(size)]), dim="images"))
    for label, factor in (("image size x0.5", 0.5), ("image size x2", 2.0)):
        resized = [_resize(_resize(t, 1, max(1, int(t.shape[1] * factor))), 2, max(1, int(t.shape[2] * factor)))
                   for t in value]
        out.append(Variant(label, SHAPE, *put(resized), dim="height"))
    return out


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
    for name in ("batch", "seq", "time", "length") + (() if dims.images else ("height", "width")):
        if name in dims.dims:
            for size in edge_sizes(dims.dims[name][0], batch=name == "batch"):
                variants.append(_shape_variant(leaves, spec, dims, name, size, f"{name}={size}"))
    if dims.images is not None:
        variants += _image_variants(args, kwargs, dims.images)

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
