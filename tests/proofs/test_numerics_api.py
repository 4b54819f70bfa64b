"""Proofs for the numerics rules about deprecated and removed APIs: what torch 2.13 really does when
the old name is called, and that each autofix computes the same thing as the code it replaces."""

from __future__ import annotations

import warnings

import pytest
import torch


def _warns(fn, category=Warning):
    """Run ``fn`` and return (result, the text of every warning of ``category`` it emitted)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    return out, " ".join(str(w.message) for w in caught if issubclass(w.category, category))


def _spd(n=4):
    a = torch.randn(n, n, dtype=torch.float64)
    return a @ a.mT + n * torch.eye(n, dtype=torch.float64)


@pytest.mark.proves("TP310")
@pytest.mark.parametrize("call", [
    lambda A, b: torch.solve(b, A),
    lambda A, b: torch.symeig(A),
    lambda A, b: torch.matrix_rank(A),
    lambda A, b: torch.lstsq(b, A),
    lambda A, b: torch.eig(A),
])
def test_removed_linalg_functions_raise(call):
    with pytest.raises(RuntimeError, match="deprecated since version 1.9 and is now removed"):
        call(_spd(), torch.randn(4, 1, dtype=torch.float64))


@pytest.mark.proves("TP311")
def test_cuda_and_cpu_amp_autocast_warn_and_the_fix_is_the_same_context():
    _, text = _warns(lambda: torch.cuda.amp.autocast(enabled=False), FutureWarning)
    assert "torch.cuda.amp.autocast(args...)` is deprecated" in text
    old, text = _warns(lambda: torch.cpu.amp.autocast(dtype=torch.bfloat16), FutureWarning)
    assert "torch.cpu.amp.autocast(args...)` is deprecated" in text
    new = torch.amp.autocast("cpu", dtype=torch.bfloat16)
    assert (old.device, old.fast_dtype, old._enabled) == (new.device, new.fast_dtype, new._enabled)
    lin = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with old:
        a = lin(x)
    with new:
        b = lin(x)
    assert a.dtype == b.dtype == torch.bfloat16 and torch.equal(a, b)


@pytest.mark.proves("TP312")
def test_cuda_amp_grad_scaler_warns_and_is_the_amp_scaler():
    old, text = _warns(lambda: torch.cuda.amp.GradScaler(init_scale=1024.0, enabled=False), FutureWarning)
    assert "torch.cuda.amp.GradScaler(args...)` is deprecated" in text
    new = torch.amp.GradScaler("cuda", init_scale=1024.0, enabled=False)
    assert isinstance(old, torch.amp.GradScaler) and old.state_dict() == new.state_dict()


@pytest.mark.proves("TP313")
def test_torch_range_warns_includes_end_and_the_fix_matches():
    old, text = _warns(lambda: torch.range(0, 9), UserWarning)
    assert "torch.range is deprecated" in text
    assert len(old) == 10 and old.dtype == torch.get_default_dtype()  # the end point is included
    assert len(torch.arange(0, 9)) == 9
    fixed = torch.arange(0, 10, dtype=torch.get_default_dtype())
    assert torch.equal(old, fixed) and old.dtype == fixed.dtype
    evens, _ = _warns(lambda: torch.range(0, 8, 2, dtype=torch.long))
    assert torch.equal(evens, torch.arange(0, 10, 2, dtype=torch.long))
    down, _ = _warns(lambda: torch.range(5, -1, -2))
    assert torch.equal(down, torch.arange(5, -3, -2, dtype=torch.get_default_dtype()))


@pytest.mark.proves("TP314")
def test_torch_qr_warns_and_linalg_qr_is_the_same():
    A = torch.randn(5, 3, dtype=torch.float64)
    (q, r), text = _warns(lambda: torch.qr(A), UserWarning)
    assert "torch.qr is deprecated in favor of torch.linalg.qr" in text
    q2, r2 = torch.linalg.qr(A)
    assert torch.allclose(q, q2) and torch.allclose(r, r2)
    (Q, R), _ = _warns(lambda: torch.qr(A, some=False))
    Q2, R2 = torch.linalg.qr(A, mode="complete")
    assert Q.shape == Q2.shape == (5, 5) and torch.allclose(Q, Q2) and torch.allclose(R, R2)


@pytest.mark.proves("TP315")
def test_torch_cholesky_warns_and_linalg_cholesky_is_the_same():
    S = _spd()
    L, text = _warns(lambda: torch.cholesky(S), UserWarning)
    assert "torch.cholesky is deprecated in favor of torch.linalg.cholesky" in text
    assert torch.allclose(L, torch.linalg.cholesky(S))
    U, _ = _warns(lambda: torch.cholesky(S, upper=True))
    assert torch.allclose(U, torch.linalg.cholesky(S).mH)


@pytest.mark.proves("TP316")
def test_chain_matmul_warns_and_multi_dot_is_the_same():
    a, b, c = torch.randn(3, 4), torch.randn(4, 5), torch.randn(5, 2)
    old, text = _warns(lambda: torch.chain_matmul(a, b, c), UserWarning)
    assert "torch.chain_matmul is deprecated" in text
    assert torch.allclose(old, torch.linalg.multi_dot([a, b, c]))


@pytest.mark.proves("TP317")
def test_lu_family_warns():
    A = _spd()
    b = torch.randn(4, 1, dtype=torch.float64)
    (LU, piv), text = _warns(lambda: torch.lu(A), UserWarning)
    assert "torch.lu is deprecated in favor of torch.linalg.lu_factor" in text
    x, text = _warns(lambda: torch.lu_solve(b, LU, piv), UserWarning)
    assert "torch.lu_solve is deprecated" in text
    assert torch.allclose(x, torch.linalg.lu_solve(LU, piv, b))
    U = torch.linalg.cholesky(A).mH
    (y, _), text = _warns(lambda: torch.triangular_solve(b, U), UserWarning)
    assert "torch.triangular_solve is deprecated" in text
    assert torch.allclose(y, torch.linalg.solve_triangular(U, b, upper=True))
