"""Eager's reference outputs on every input variant, and the dims eager confirmed: what both
export-check and compile-check compare their artifacts with.

The dims are guessed from positions (:func:`~torchpact.audit.variants.infer_dims`), named by the
modules that take them (:mod:`torchpact.audit.layout`), kept where eager accepts other sizes, and
searched for the smallest size eager accepts (halving from the example, then bisecting), which is
added as a variant when the edge sizes did not already hit it.
"""

from __future__ import annotations

from typing import Any

from torchpact.audit import _common as C
from torchpact.audit.layout import apply_layout, module_inputs
from torchpact.audit.variants import EXAMPLE, Dims, Variant, infer_dims, make_variants, shape_variant


class Eager:
    """Eager outputs of every valid variant (a variant eager itself rejects is dropped)."""

    def __init__(self, model: Any, variants: list[Variant]) -> None:
        self.model = model
        self.refs: dict[str, list[tuple[str, Any]]] = {}
        self.foreign: list[tuple[str, str]] = []
        self.valid: list[Variant] = []
        self.invalid: dict[str, str] = {}
        for v in variants:
            self.add(v)

    def run(self, v: Variant) -> Any:
        import torch

        with torch.no_grad(), C.quiet():
            return self.model(*v.args, **v.kwargs)

    def accepts(self, v: Variant) -> bool:
        """Whether eager returns on ``v`` (nothing recorded)."""
        try:
            self.run(v)
        except Exception:
            return False
        return True

    def add(self, v: Variant) -> bool:
        """Record eager's output on ``v`` (or why eager rejects it); whether eager accepted it."""
        if v.name in self.refs or v.name in self.invalid:
            return v.name in self.refs
        try:
            out = self.run(v)
        except Exception as exc:  # the variant is not an input this model takes
            if v.kind == EXAMPLE:
                raise
            self.invalid[v.name] = "eager raised " + C.first_line(exc, 160)
            return False
        tensors, foreign = C.output_leaves(out)
        self.refs[v.name] = [(n, t.detach().clone()) for n, t in tensors]
        if v.kind == EXAMPLE:
            self.foreign = foreign
        self.valid.append(v)
        return True


def eager_inputs(model: Any, args: tuple, kwargs: dict[str, Any]) -> tuple[Dims, list[Variant], Eager]:
    """The inferred dims (candidates eager rejects dropped), all variants, and eager's outputs.

    A rejected variant along a dropped candidate axis (the features of an ``(N, T, F)`` input) was a
    guess, not an input the model should take: it is not listed as invalid.
    """
    dims = apply_layout(infer_dims(args, kwargs), args, kwargs, module_inputs(model, args, kwargs))
    variants = make_variants(args, kwargs, dims)
    eager = Eager(model, variants)
    accepted = dims.accepted(eager.valid)
    dropped = set(dims.dims) - set(accepted.dims)
    by_name = {v.name: v for v in variants}
    eager.invalid = {n: r for n, r in eager.invalid.items() if by_name[n].dim not in dropped}
    variants = [v for v in variants if v.dim not in dropped]
    if accepted.images is None:
        for name in list(accepted.dims):
            smallest = smallest_accepted(eager, args, kwargs, accepted, name)
            accepted.smallest[name] = smallest
            v = shape_variant(args, kwargs, accepted, name, smallest)
            if smallest != accepted.dims[name][0] and v.name not in by_name:
                eager.add(v)
                variants.append(v)
    return accepted, variants, eager


def smallest_accepted(eager: Eager, args: tuple, kwargs: dict[str, Any], dims: Dims, name: str) -> int:
    """The smallest size along ``name`` eager accepts: halving from the example while eager accepts,
    then bisecting between the last size accepted and the first refused. Sizes eager already ran are
    not run again."""
    size = dims.dims[name][0]

    def accepts(k: int) -> bool:
        v = shape_variant(args, kwargs, dims, name, k)
        if v.name in eager.refs or v.name in eager.invalid:
            return v.name in eager.refs
        return eager.accepts(v)

    ok, refused = size, None
    k = size // 2
    while k >= 1:
        if not accepts(k):
            refused = k
            break
        ok, k = k, k // 2
    if refused is None:
        return ok
    while ok - refused > 1:
        mid = (ok + refused) // 2
        if accepts(mid):
            ok = mid
        else:
            refused = mid
    return ok
