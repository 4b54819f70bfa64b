"""TP329 makes its matrix remark only where `torch.norm`'s arguments leave the norm ambiguous."""

from __future__ import annotations

from tests.lint_helpers import lint_code

REMARK = "flattens it instead of taking the matrix 2-norm"

CALLS = {
    # call -> whether the p=2-on-a-matrix remark applies
    "torch.norm(w)": False,  # the default p is 'fro': the flattened norm, as torch.linalg.norm(w) computes
    "torch.norm(input=w)": False,
    "torch.norm(w, None)": False,
    "torch.norm(w, p=None, dim=None)": False,
    "torch.norm(w - w0).item()": False,
    "torch.norm(w, 2, keepdim=True)": True,
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
    # 1-D inputs: a factory given one int size, a number times one
    "torch.norm(torch.ones(7), 2)": False,
    "torch.norm(0.5 * torch.zeros(len(xs)), p=2)": False,
    "torch.norm(torch.randn(size=(4,)) + 1, 2.0)": False,
    "torch.norm(torch.full((3,), 2.0) * 2, 2)": False,
    "torch.norm(torch.full(dims, 2.0), 2)": True,  # a shape whose length is not known here
    "torch.norm(torch.rand(x.shape[0]), 2)": False,
    "torch.norm(torch.ones(3, 4), 2)": True,
    "torch.norm(torch.ones(x.shape), 2)": True,
    "torch.norm(torch.ones(shape), p=2)": True,
    "torch.norm(sigma * torch.ones(5), 2)": True,  # sigma may be a tensor that broadcasts to a matrix
}


def test_the_matrix_remark_needs_a_written_p2_with_no_dim():
    for call, remark in CALLS.items():
        findings, _ = lint_code(f"import torch\nvalue = {call}\n", select=["TP329"])
        assert len(findings) == 1, call  # the deprecation itself is always reported
        assert (REMARK in findings[0].message) == remark, call


def test_the_default_p_is_judged_in_every_form():
    code = """
import torch
def report(model, scale, step):
    for p in model.parameters():
        print(step, torch.norm(p).item(), torch.norm(p.grad))
    clipped = scale / torch.norm(scale).clamp_(min=1.0)
    if step:
        return torch.norm(input=clipped, dim=None)
    return [torch.norm(t, keepdim=False) for t in (scale, clipped)]
"""
    findings, _ = lint_code(code, select=["TP329"])
    assert len(findings) == 5
    assert all(REMARK not in f.message and "default `p='fro'`" in f.message for f in findings)
    twin = code.replace("torch.norm(p).item()", "torch.norm(p, 2).item()")
    findings, _ = lint_code(twin, select=["TP329"])
    assert sum(REMARK in f.message for f in findings) == 1
