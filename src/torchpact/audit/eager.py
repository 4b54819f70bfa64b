"""Eager's reference outputs on every input variant, and the dims eager confirmed: what both
export-check and compile-check compare their artifacts with."""

from __future__ import annotations

from typing import Any

from torchpact.audit import _common as C
from torchpact.audit.variants import EXAMPLE, Dims, Variant, infer_dims, make_variants


class Eager:
    """Eager outputs of every valid variant (a variant eager itself rejects is dropped)."""

    def __init__(self, model: Any, variants: list[Variant]) -> None:
        import torch

        self.refs: dict[str, list[tuple[str, Any]]] = {}
        self.foreign: list[tuple[str, str]] = []
        self.valid: list[Variant] = []
        self.invalid: dict[str, str] = {}
        for v in variants:
            try:
                with torch.no_grad(), C.quiet():
                    out = model(*v.args, **v.kwargs)
            except Exception as exc:  # the variant is not an input this model takes
                if v.kind == EXAMPLE:
                    raise
                self.invalid[v.name] = "eager raised " + C.first_line(exc, 160)
                continue
            tensors, foreign = C.output_leaves(out)
            self.refs[v.name] = [(n, t.detach().clone()) for n, t in tensors]
            if v.kind == EXAMPLE:
                self.foreign = foreign
            self.valid.append(v)


def eager_inputs(model: Any, args: tuple, kwargs: dict[str, Any]) -> tuple[Dims, list[Variant], Eager]:
    """The inferred dims (candidates eager rejects dropped), all variants, and eager's outputs.

    A rejected variant along a dropped candidate axis (the features of an ``(N, T, F)`` input) was a
    guess, not an input the model should take: it is not listed as invalid.
    """
    dims = infer_dims(args, kwargs)
    variants = make_variants(args, kwargs, dims)
    eager = Eager(model, variants)
    accepted = dims.accepted(eager.valid)
    dropped = set(dims.dims) - set(accepted.dims)
    by_name = {v.name: v for v in variants}
    eager.invalid = {n: r for n, r in eager.invalid.items() if by_name[n].dim not in dropped}
    return accepted, [v for v in variants if v.dim not in dropped], eager

