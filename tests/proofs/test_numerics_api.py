"""Proofs for the numerics rules about deprecated and removed APIs: what torch 2.13 really does when
the old name is called, and that each autofix computes the same thing as the code it replaces."""

from __future__ import annotations

import inspect

import pytest
import torch

from tests.proofs.warned import warned


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
    _, text = warned(lambda: torch.cuda.amp.autocast(enabled=False), FutureWarning)
    assert "torch.cuda.amp.autocast(args...)` is deprecated" in text
    old, text = warned(lambda: torch.cpu.amp.autocast(dtype=torch.bfloat16), FutureWarning)
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
    old, text = warned(lambda: torch.cuda.amp.GradScaler(init_scale=1024.0, enabled=False), FutureWarning)
    assert "torch.cuda.amp.GradScaler(args...)` is deprecated" in text
    new = torch.amp.GradScaler("cuda", init_scale=1024.0, enabled=False)
    assert isinstance(old, torch.amp.GradScaler) and old.state_dict() == new.state_dict()


@pytest.mark.proves("TP313")
def test_torch_range_warns_includes_end_and_the_fix_matches():
    old, text = warned(lambda: torch.range(0, 9), UserWarning)
    assert "torch.range is deprecated" in text
    assert len(old) == 10 and old.dtype == torch.get_default_dtype()  # the end point is included
    assert len(torch.arange(0, 9)) == 9
    fixed = torch.arange(0, 10, dtype=torch.get_default_dtype())
    assert torch.equal(old, fixed) and old.dtype == fixed.dtype
    evens, _ = warned(lambda: torch.range(0, 8, 2, dtype=torch.long))
    assert torch.equal(evens, torch.arange(0, 10, 2, dtype=torch.long))
    down, _ = warned(lambda: torch.range(5, -1, -2))
    assert torch.equal(down, torch.arange(5, -3, -2, dtype=torch.get_default_dtype()))


@pytest.mark.proves("TP314")
def test_torch_qr_warns_and_linalg_qr_is_the_same():
    A = torch.randn(5, 3, dtype=torch.float64)
    (q, r), text = warned(lambda: torch.qr(A), UserWarning)
    assert "torch.qr is deprecated in favor of torch.linalg.qr" in text
    q2, r2 = torch.linalg.qr(A)
    assert torch.allclose(q, q2) and torch.allclose(r, r2)
    (Q, R), _ = warned(lambda: torch.qr(A, some=False))
    Q2, R2 = torch.linalg.qr(A, mode="complete")
    assert Q.shape == Q2.shape == (5, 5) and torch.allclose(Q, Q2) and torch.allclose(R, R2)


@pytest.mark.proves("TP315")
def test_torch_cholesky_warns_and_linalg_cholesky_is_the_same():
    S = _spd()
    L, text = warned(lambda: torch.cholesky(S), UserWarning)
    assert "torch.cholesky is deprecated in favor of torch.linalg.cholesky" in text
    assert torch.allclose(L, torch.linalg.cholesky(S))
    U, _ = warned(lambda: torch.cholesky(S, upper=True))
    assert torch.allclose(U, torch.linalg.cholesky(S).mH)


@pytest.mark.proves("TP316")
def test_chain_matmul_warns_and_multi_dot_is_the_same():
    a, b, c = torch.randn(3, 4), torch.randn(4, 5), torch.randn(5, 2)
    old, text = warned(lambda: torch.chain_matmul(a, b, c), UserWarning)
    assert "torch.chain_matmul is deprecated" in text
    assert torch.allclose(old, torch.linalg.multi_dot([a, b, c]))


@pytest.mark.proves("TP317")
def test_lu_familywarned():
    A = _spd()
    b = torch.randn(4, 1, dtype=torch.float64)
    (LU, piv), text = warned(lambda: torch.lu(A), UserWarning)
    assert "torch.lu is deprecated in favor of torch.linalg.lu_factor" in text
    x, text = warned(lambda: torch.lu_solve(b, LU, piv), UserWarning)
    assert "torch.lu_solve is deprecated" in text
    assert torch.allclose(x, torch.linalg.lu_solve(LU, piv, b))
    U = torch.linalg.cholesky(A).mH
    (y, _), text = warned(lambda: torch.triangular_solve(b, U), UserWarning)
    assert "torch.triangular_solve is deprecated" in text
    assert torch.allclose(y, torch.linalg.solve_triangular(U, b, upper=True))


@pytest.mark.proves("TP318")
def test_softmax_without_dim_normalises_a_3d_batch_over_the_batch():
    import torch.nn.functional as F

    x = torch.randn(2, 3, 5)
    p, text = warned(lambda: F.softmax(x), UserWarning)
    assert "Implicit dimension choice for softmax has been deprecated" in text
    assert torch.allclose(p, F.softmax(x, dim=0))  # the batch dimension
    assert not torch.allclose(p.sum(-1), torch.ones(2, 3))  # rows over the classes do not sum to 1
    lp, _ = warned(lambda: torch.nn.LogSoftmax()(x))
    assert torch.allclose(lp, F.log_softmax(x, dim=0))


@pytest.mark.proves("TP318")
def test_a_softmax_module_without_dim_guesses_only_when_applied():
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = torch.nn.Softmax()  # building it guesses nothing
    assert caught == [] and module.dim is None
    _, text = warned(lambda: module(torch.randn(2, 3, 5)), UserWarning)
    assert "Implicit dimension choice" in text


@pytest.mark.proves("TP318")
def test_a_softmax_of_a_numpy_array_or_a_list_raises_with_or_without_dim():
    import numpy as np
    import torch.nn.functional as F

    host = torch.randn(5).numpy()
    for value in (host, host[np.array([1, 0])], host * 2.0 - 1, host.sum(), [0.1, 0.9], 2.0, torch.randn(1).item()):
        for kwargs in ({}, {"dim": 0}):
            with pytest.raises(AttributeError):  # no ``.dim()`` / ``.softmax()``: no dimension is guessed
                F.softmax(value, **kwargs)
        with pytest.raises(AttributeError):
            torch.nn.Softmax()(value)
    t = torch.randn(5)  # numpy functions that hand a tensor back: those inputs stay tensors
    assert isinstance(np.argsort(t), torch.Tensor) and isinstance(np.exp(t), torch.Tensor)
    assert type(np.array(t)) is np.ndarray and type(np.zeros_like(t)) is np.ndarray


@pytest.mark.proves("TP319")
def test_log_of_one_plus_small_x_is_zero_where_log1p_is_exact():
    x = torch.tensor([1e-10])
    assert torch.log(1 + x).item() == 0.0
    assert torch.log1p(x).item() == pytest.approx(1e-10, rel=1e-6)
    y = torch.rand(100) * 10
    assert torch.allclose(torch.log(1 + y), torch.log1p(y))



@pytest.mark.proves("TP319")
def test_log_of_one_plus_terms_that_are_zero_or_at_least_one_loses_nothing():
    # exp of a value masked to -inf where negative: each term is 0 or >= 1, and so is their sum
    z = torch.randn(64, 32) * 3
    z[z < 0] = float("-inf")
    x = torch.exp(z).sum(dim=1)
    assert bool(((x == 0) | (x >= 1)).all())
    exact = torch.log1p(x.double())
    assert torch.allclose(torch.log(1 + x).double(), exact, rtol=1e-6, atol=0)
    assert torch.allclose(torch.log1p(x).double(), exact, rtol=1e-6, atol=0)
    counts = torch.unique_consecutive(torch.tensor([3, 3, 1, 1, 1, 2]), return_counts=True)[1]
    assert counts.dtype == torch.int64  # counts are integers: 1 + counts is exact
    # a float table of index differences (arange grids cast to float32) holds whole numbers:
    # 1 + |x| is exact there, and log(1 + |x|) matches log1p(|x|) to rounding
    axis = torch.arange(-15, 16).to(torch.float32)
    table = torch.stack(torch.meshgrid(axis, axis, indexing="ij")).permute(1, 2, 0).reshape(-1, 2).abs()
    assert bool((table == table.round()).all()) and bool(((1.0 + table) - table == 1.0).all())
    assert torch.allclose(torch.log(1.0 + table).double(), torch.log1p(table.double()), rtol=1e-6, atol=0)


@pytest.mark.proves("TP320")
def test_exp_minus_one_of_small_x_cancels_where_expm1_is_exact():
    x = torch.tensor([1e-10])
    assert (torch.exp(x) - 1).item() == 0.0
    assert torch.expm1(x).item() == pytest.approx(1e-10, rel=1e-6)
    y = torch.randn(100)
    assert torch.allclose(torch.exp(y) - 1, torch.expm1(y), atol=1e-6)
    # a value fixed away from 0 cancels nothing: exp(1 - 1e-4) - 1 = 1.718, and from 0.1 on the two
    # agree to a few ulps
    assert (torch.exp(torch.tensor(1.0 - 1e-4)) - 1).item() == pytest.approx(1.71801, rel=1e-5)
    far = torch.tensor([0.1, -0.1, 0.5, -2.0, 5.0])
    assert torch.allclose(torch.exp(far) - 1, torch.expm1(far), rtol=1e-6, atol=0)


@pytest.mark.proves("TP320")
def test_exp_minus_one_rounded_or_clamped_before_use_equals_expm1():
    # log-durations around 0 (the cancelling region) and far from it, with a 0/1 mask and a scale
    x = torch.cat([torch.tensor([1e-10, -1e-10, 1e-8, -3e-8, 0.0]), torch.randn(1000) * 3])
    mask = (torch.rand(x.shape) > 0.2).float()
    old, new = (torch.exp(x) - 1) * mask * 1.1, torch.expm1(x) * mask * 1.1
    for settle in (torch.round, torch.trunc, lambda d: d.long(), lambda d: d.int(),
                   lambda d: torch.clamp(d, min=0.1), lambda d: d.clamp_min(1),
                   lambda d: torch.clamp_min(torch.ceil(d), 1), lambda d: torch.clamp(torch.floor(d), min=1.0)):
        a, b = settle(old), settle(new)
        assert torch.equal(a, b) or torch.allclose(a.double(), b.double(), rtol=1e-6, atol=0)
    masked_old, masked_new = old.clone(), new.clone()
    masked_old[masked_old < 1] = 1.0
    masked_new[masked_new < 1] = 1.0
    assert torch.allclose(masked_old, masked_new, rtol=1e-6, atol=0)
    # what still needs the digits: ceil alone, a clamp to 0, a division by x
    tiny = torch.tensor([1e-10])
    assert torch.ceil(torch.exp(tiny) - 1).item() == 0 and torch.ceil(torch.expm1(tiny)).item() == 1
    assert ((torch.exp(tiny) - 1) / tiny).item() == 0 and ((torch.expm1(tiny)) / tiny).item() == pytest.approx(1)
    # a one-element literal tensor holds a known value: exp(1) - 1 cancels nothing
    assert (torch.exp(torch.Tensor([1.0])) - 1).item() == pytest.approx(torch.expm1(torch.tensor(1.0)).item(), rel=1e-6)


@pytest.mark.proves("TP319", "TP320")
def test_whole_numbers_do_not_round_in_one_plus_x_or_cancel_in_exp_minus_one():
    whole = torch.arange(0, 2000, dtype=torch.float32)
    assert torch.equal((1 + whole) - 1, whole)  # 1 + x is exact: log(1 + x) has nothing to lose
    assert torch.allclose(torch.log(1 + whole), torch.log1p(whole), rtol=1e-6, atol=0)
    counts = torch.randint(0, 50, (100,))
    assert torch.allclose(torch.log(1 + counts), torch.log1p(counts), rtol=1e-6, atol=0)
    assert torch.allclose(torch.log(1 + torch.floor(whole / 7)), torch.log1p(torch.floor(whole / 7)), rtol=1e-6)
    steps = torch.arange(-20, 21, dtype=torch.float32)  # |x| is 0 or at least 1: no cancellation
    assert torch.allclose(torch.exp(steps) - 1, torch.expm1(steps), rtol=1e-6, atol=1e-7)
    tiny = torch.tensor([1e-10])  # the fraction the rules are about, for contrast
    assert (torch.log(1 + tiny) == 0).all() and (torch.exp(tiny) - 1 == 0).all()


@pytest.mark.proves("TP321")
def test_cuda_amp_custom_fwd_and_bwd_warn_and_amp_versions_work_on_cpu():
    _, text = warned(lambda: torch.cuda.amp.custom_fwd(lambda ctx, x: x), FutureWarning)
    assert "torch.cuda.amp.custom_fwd(args...)` is deprecated" in text
    _, text = warned(lambda: torch.cuda.amp.custom_bwd(lambda ctx, g: g), FutureWarning)
    assert "torch.cuda.amp.custom_bwd(args...)` is deprecated" in text

    class Mul(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(cast_inputs=torch.float32, device_type="cuda")
        def forward(ctx, x):
            return x * 2

        @staticmethod
        @torch.amp.custom_bwd(device_type="cuda")
        def backward(ctx, g):
            return g * 2

    x = torch.ones(3, requires_grad=True)
    Mul.apply(x).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]


@pytest.mark.proves("TP322")
def test_size_average_and_reduce_warn_and_override_reduction():
    a, b = torch.randn(4, 3), torch.randn(4, 3)
    crit, text = warned(lambda: torch.nn.MSELoss(size_average=False, reduction="mean"), UserWarning)
    assert "size_average and reduce args will be deprecated" in text
    assert crit.reduction == "sum"  # the explicit reduction= was ignored
    assert torch.allclose(crit(a, b), torch.nn.MSELoss(reduction="sum")(a, b))
    per_item, _ = warned(lambda: torch.nn.functional.mse_loss(a, b, reduce=False))
    assert torch.equal(per_item, torch.nn.functional.mse_loss(a, b, reduction="none"))


@pytest.mark.proves("TP323")
def test_stft_without_return_complex_raises_for_real_input():
    wave = torch.randn(1600)
    with pytest.raises(RuntimeError, match="stft requires the return_complex parameter"):
        torch.stft(wave, n_fft=400, window=torch.hann_window(400))
    spec = torch.stft(wave, n_fft=400, window=torch.hann_window(400), return_complex=True)
    assert spec.is_complex()


@pytest.mark.proves("TP324")
def test_functional_upsample_warns_and_interpolate_is_the_same():
    import torch.nn.functional as F

    x = torch.randn(1, 2, 5, 5)
    old, text = warned(lambda: F.upsample(x, scale_factor=2, mode="bilinear", align_corners=False), UserWarning)
    assert "nn.functional.upsample is deprecated" in text.replace("`", "")
    assert torch.equal(old, F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False))
    old, text = warned(lambda: F.upsample_bilinear(x, size=(9, 9)), UserWarning)
    assert "upsample_bilinear` is deprecated" in text
    assert torch.equal(old, F.interpolate(x, size=(9, 9), mode="bilinear", align_corners=True))
    assert not torch.equal(old, F.interpolate(x, size=(9, 9), mode="bilinear"))
    old, _ = warned(lambda: F.upsample_nearest(x, scale_factor=3))
    assert torch.equal(old, F.interpolate(x, scale_factor=3, mode="nearest"))


@pytest.mark.proves("TP325")
def test_upsampling_modules_are_upsample_with_fixed_modes():
    x = torch.randn(1, 2, 5, 5)
    assert torch.equal(torch.nn.UpsamplingBilinear2d(scale_factor=2)(x),
                       torch.nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)(x))
    assert not torch.equal(torch.nn.UpsamplingBilinear2d(scale_factor=2)(x),
                           torch.nn.Upsample(scale_factor=2, mode="bilinear")(x))
    assert torch.equal(torch.nn.UpsamplingNearest2d(size=(7, 7))(x),
                       torch.nn.Upsample(size=(7, 7), mode="nearest")(x))
    assert "deprecated" in torch.nn.UpsamplingBilinear2d.__doc__.lower()
    _, text = warned(lambda: torch.nn.UpsamplingBilinear2d(scale_factor=2)(x))
    assert text == ""  # deprecated in the documentation only: torch 2.13 does not warn


@pytest.mark.proves("TP326")
def test_set_default_tensor_typewarned():
    before = torch.get_default_dtype()
    try:
        _, text = warned(lambda: torch.set_default_tensor_type(torch.DoubleTensor), UserWarning)
        assert "set_default_tensor_type() is deprecated as of PyTorch 2.1" in text
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(before)


@pytest.mark.proves("TP327")
def test_assert_allclose_warns_and_assert_close_checks_dtypes():
    a = torch.ones(3)
    _, text = warned(lambda: torch.testing.assert_allclose(a, a.double()), FutureWarning)
    assert "assert_allclose()` is deprecated since 1.12" in text
    with pytest.raises(AssertionError, match="dtype"):
        torch.testing.assert_close(a, a.double())
    torch.testing.assert_close(a, a.double(), check_dtype=False)


@pytest.mark.proves("TP328")
def test_ger_is_outer():
    u, v = torch.randn(3), torch.randn(4)
    assert torch.equal(torch.ger(u, v), torch.outer(u, v))
    assert "deprecated" in torch.ger.__doc__
    _, text = warned(lambda: torch.ger(u, v))
    assert text == ""  # deprecated in the documentation only: torch 2.13 does not warn


@pytest.mark.proves("TP329")
def test_torch_norm_p2_on_a_matrix_is_frobenius_not_the_spectral_norm():
    M = torch.tensor([[3.0, 0.0], [4.0, 5.0]])
    assert torch.norm(M, p=2).item() == pytest.approx(torch.linalg.vector_norm(M, 2).item())
    assert torch.linalg.norm(M, 2).item() != pytest.approx(torch.norm(M, p=2).item(), rel=1e-3)
    assert "deprecated" in torch.norm.__doc__
    _, text = warned(lambda: torch.norm(M, p=2))
    assert text == ""  # deprecated in the documentation only: torch 2.13 does not warn
    rows = torch.randn(4, 3)
    assert torch.allclose(torch.norm(rows, dim=-1), torch.linalg.vector_norm(rows, 2, dim=-1))
    # the default p is 'fro': torch.norm(M) is the flattened norm, which linalg.norm(M) computes too
    assert inspect.signature(torch.norm).parameters["p"].default == "fro"
    assert torch.norm(M).item() == pytest.approx(torch.linalg.norm(M).item())
    assert torch.norm(M).item() == pytest.approx(torch.linalg.vector_norm(M).item())
    # one int size, or a one-element shape, makes a 1-D tensor
    assert torch.ones(7).dim() == torch.randn(size=(4,)).dim() == torch.full((5,), 2.0).dim() == 1
    # no ambiguity where the call says what it means: an explicit 'fro', or p=2 over chosen dims,
    # is the flattened norm over those dims, exactly what vector_norm computes
    cube = torch.randn(2, 3, 4)
    assert torch.allclose(torch.norm(cube, p="fro"), torch.linalg.vector_norm(cube))
    assert torch.allclose(torch.norm(cube, p=2, dim=(1, 2)), torch.linalg.vector_norm(cube, 2, dim=(1, 2)))


@pytest.mark.proves("TP330")
def test_svd_returns_v_where_linalg_svd_returns_vh_and_full_factors():
    A = torch.randn(5, 3, dtype=torch.float64)
    U, S, V = torch.svd(A)
    U2, S2, Vh = torch.linalg.svd(A)
    assert U.shape == (5, 3) and U2.shape == (5, 5)  # reduced vs full by default
    assert torch.allclose(U @ torch.diag(S) @ V.mT, A)
    assert torch.allclose(V.abs(), Vh.mH.abs()) and not torch.allclose(V, Vh, atol=1e-3)
    assert "deprecated" in torch.svd.__doc__
    _, text = warned(lambda: torch.svd(A))
    assert text == ""  # deprecated in the documentation only: torch 2.13 does not warn


@pytest.mark.proves("TP331")
def test_clipping_scaled_gradients_shrinks_the_update_by_the_scale():
    def update(unscale_first):
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        before = model.weight.detach().clone()
        loss = model(torch.randn(4, 8)).pow(2).mean() * 10
        scaler.scale(loss).backward()
        if unscale_first:
            scaler.unscale_(opt)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        return norm.item(), (model.weight.detach() - before).norm().item()

    scaled_norm, small_step = update(False)
    true_norm, right_step = update(True)
    assert scaled_norm == pytest.approx(1024 * true_norm, rel=1e-4)  # clipping saw the scaled norm
    assert true_norm > 1.0  # so clipping should have limited the update to norm ~1
    assert small_step == pytest.approx(right_step / 1024, rel=1e-3)  # but it shrank it 1024 times more


@pytest.mark.proves("TP357")
def test_nll_loss_on_probabilities_is_minus_p_not_the_log_likelihood():
    import torch.nn.functional as F

    logits = torch.tensor([[0.0, 10.0, 0.0], [50.0, 0.0, 0.0]], requires_grad=True)
    y = torch.tensor([0, 0])
    loss = F.nll_loss(F.softmax(logits, dim=1), y)
    p = F.softmax(logits, dim=1).detach()
    assert loss.item() == pytest.approx(-(p[0, 0] + p[1, 0]).item() / 2)
    assert loss.item() < 0  # a "loss" of -0.5, where the real one is about 5
    assert F.nll_loss(F.log_softmax(logits, dim=1), y).item() == pytest.approx(
        F.cross_entropy(logits, y).item())


@pytest.mark.proves("TP332")
def test_kl_div_on_probabilities_is_not_a_divergence():
    import torch.nn.functional as F

    p = F.softmax(torch.tensor([[1.0, 2.0, 3.0]]), -1)
    wrong = F.kl_div(p, p, reduction="batchmean")  # identical distributions
    right = F.kl_div(p.log(), p, reduction="batchmean")
    assert right.item() == pytest.approx(0.0, abs=1e-6)
    assert wrong.item() != pytest.approx(0.0, abs=1e-2)
    q = F.softmax(torch.tensor([[3.0, 0.0, -3.0]]), -1)
    assert F.kl_div(q, p, reduction="batchmean").item() < 0  # negative "divergence"


@pytest.mark.proves("TP333")
def test_sigmoid_into_bce_with_logits_has_a_floor_and_vanishing_gradients():
    import math

    import torch.nn.functional as F

    z = torch.tensor([20.0], requires_grad=True)
    y = torch.tensor([1.0])
    loss = F.binary_cross_entropy_with_logits(torch.sigmoid(z), y)
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-1)), rel=1e-5)  # 0.313, the floor
    wrong = torch.tensor([-20.0], requires_grad=True)  # confidently wrong
    F.binary_cross_entropy_with_logits(torch.sigmoid(wrong), y).backward()
    assert abs(wrong.grad.item()) < 1e-8
    right = torch.tensor([-20.0], requires_grad=True)
    F.binary_cross_entropy_with_logits(right, y).backward()
    assert right.grad.item() == pytest.approx(-1.0, abs=1e-6)
