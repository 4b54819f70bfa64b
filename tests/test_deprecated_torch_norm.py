"""TP329 makes its matrix remark only where `torch.norm`'s arguments leave the norm ambiguous."""

from __future__ import annotations

from tests.lint_helpers import lint_code

REMARK = "flattens it instead of taking the matrix 2-norm"

CALLS = {
    # call -> whether the p=2-on-a-matrix remark applies
    "torch.norm(w)": True,
    "torch.norm(w, 2)": True,
    "torch.norm(w, p=2.0)": True,
    "torch.norm(w, p=order)": True,  # may be 2
    "torch.norm(w, 2, None)": True,
    "torch.norm(w, p='fro')": False,
    "torch.norm(w, 'fro', keepdim=True)": False,
    "torch.norm(w, 'nuc')": False,
    "torch.norm(w, 1)": False,
    "torch.norm(w, p=float('inf'))": False,
    "torch.norm(w, p=2, dim=(1, 2))": False,
    "torch.norm(w, dim=[-2, -1])": False,
    "torch.norm(w, 2, -1)": False,
    "torch.norm(torch.stack([g.norm() for g in grads]), 2)": False,
    "torch.norm(torch.arange(5.0))": False,
}


def test_the_matrix_remark_needs_p2_or_the_default_with_no_dim():
    for call, remark in CALLS.items():
        findings, _ = lint_code(f"import torch\nvalue = {call}\n", select=["TP329"])
        assert len(findings) == 1, call  # the deprecation itself is always reported
        assert (REMARK in findings[0].message) == remark, call
