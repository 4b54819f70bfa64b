from __future__ import annotations

import ast

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, argument, is_const
from torchpact.lint.rules._api import ApiUse


class DeprecatedTorchNorm(ApiUse):
    """`torch.norm` is used; it is deprecated and its `p=2` on a matrix is not the matrix 2-norm.

    ## What it does
    Flags calls of the function `torch.norm` (TorchFix TOR101); `x.norm()` is not flagged.

    ## Why is this bad?
    torch's documentation marks `torch.norm` deprecated ("may be removed in a future PyTorch
    release") in favour of `torch.linalg.vector_norm` / `matrix_norm` / `norm`; torch 2.13 does not
    warn (the proof checks it), so this is advice, not a removal notice. Its meaning
    depends on its arguments in ways that surprise: on torch 2.13 `torch.norm(M, p=2)` of a matrix
    flattens it (the Frobenius norm), while `torch.linalg.norm(M, 2)` is the spectral norm — the
    two differ on most matrices. Along one `dim` it is a vector norm, what
    `torch.linalg.vector_norm(x, p, dim)` computes: the finding then says only that.

    ## Fix safety
    No autofix, because the right replacement depends on what was meant: `torch.linalg.vector_norm(x,
    p)` keeps `torch.norm`'s flattening behaviour exactly; `torch.linalg.matrix_norm` computes
    matrix norms.
    """

    code = "TP329"
    category = Category.NUMERICS
    severity = Severity.INFO
    message = ("`torch.norm` is marked deprecated in torch's documentation (torch 2.13 does not warn), and its `p=2` "
               "on a matrix flattens it instead of taking the matrix 2-norm")
    fix_hint = "use `torch.linalg.vector_norm(x, p, dim)` (same result) or `torch.linalg.matrix_norm` for matrix norms"
    triggers = ("norm",)
    names = {"torch.norm": None}

    def describe_call(self, call: ast.Call, ctx: FileContext, qn: str) -> str | None:
        dim = argument(call, "dim", 2)
        if dim is not None and not is_const(dim, None) and not isinstance(dim, (ast.Tuple, ast.List)):
            # one dimension: a vector norm along it, exactly what linalg.vector_norm computes
            return ("`torch.norm` is marked deprecated in torch's documentation (torch 2.13 does not warn); "
                    "along one `dim` it computes what `torch.linalg.vector_norm` does")
        return None

    valid = ["""
import torch
n = torch.linalg.vector_norm(g, 2)
m = grad.norm()
"""]
    invalid = ["""
import torch
total = torch.norm(torch.stack([p.grad.norm() for p in params]), 2)
""", """
import torch
lengths = torch.norm(vectors, dim=-1, keepdim=True)
"""]
