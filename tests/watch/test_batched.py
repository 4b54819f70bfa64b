"""The batched per-tensor reductions of ``watchers/_batched.py`` agree with one op per tensor."""

from __future__ import annotations

import contextlib

import pytest
import torch

from torchpact.watch.watchers._batched import all_zero

INF, NAN = float("inf"), float("nan")


def _corners() -> list[torch.Tensor]:
    return [
        torch.zeros(3),
        torch.tensor([0.0, -0.0]),
        torch.tensor([0.0, NAN]),
        torch.tensor([0.0, -INF]),
        torch.tensor([1e-30, 0.0]),         # its square underflows in float32
        torch.tensor([1e-45]),              # the smallest float32 subnormal
        torch.tensor([3e38, 3e38]),         # its 2-norm overflows float32
        torch.tensor([1e-200], dtype=torch.float64),  # 0 as float32, not zero as float64
        torch.zeros(2, 2, dtype=torch.bfloat16),
        torch.tensor([0.0, -2.5], dtype=torch.bfloat16),
        torch.tensor([0.0, 1e-7], dtype=torch.float16),
        torch.randn(4, 5)[:, ::2],          # not contiguous
    ]


def test_all_zero_is_exactly_not_any_nonzero_element():
    tensors = _corners()
    assert all_zero(tensors) == [not bool(t.ne(0).any()) for t in tensors]
    assert all_zero(tensors) == [True, True, False, False, False, False, False, False, True, False, False, False]
    assert all_zero([]) == []


def test_grad_norms_are_the_per_tensor_norms_whatever_the_dtypes():
    from torchpact.watch.watchers._batched import grad_norms

    tensors = _corners()
    got = grad_norms(tensors)
    assert got.dtype == torch.float64  # one float64 gradient: its finite norm must not read as inf
    want = [torch.linalg.vector_norm(t.double() if t.dtype == torch.float64 else t.float()).item() for t in tensors]
    for g, w in zip(got.tolist(), want, strict=True):
        assert (g != g and w != w) or g == pytest.approx(w, rel=1e-3)
    assert grad_norms([torch.tensor([3e38, 3e38])]).item() == INF  # float32 gradients: float32 norms


def test_cached_grad_norms_are_reused_only_for_the_same_tensors_at_the_same_version():
    from torchpact.watch.step_cache import StepCache
    from torchpact.watch.watchers._batched import grad_norms

    a, b, c = torch.tensor([3.0, 4.0]), torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0])
    cache = StepCache()
    first = grad_norms([a, b, c], cache)
    assert grad_norms([a, b, c], cache) is first                   # the same gradients: the same vector
    assert grad_norms([c, a], cache).tolist() == [2.0, 5.0]        # a subset, in its own order
    a.mul_(2)                                                       # written in place: measured again
    assert grad_norms([a, b], cache).tolist() == [10.0, 1.0]
    assert grad_norms([torch.tensor([3.0, 4.0])], cache).tolist() == [5.0]  # another tensor, same values


def _sampled_step_norm_ops(watchers: list[str]) -> int:
    """``_foreach_norm`` ops of one sampled training step under ``watchers`` (torch.profiler counts them)."""
    from torch.profiler import ProfilerActivity, profile

    from torchpact.watch import Sampler, watch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with watch(watchers, sampler=Sampler(first=3)) as session:
        for step in range(3):
            with profile(activities=[ProfilerActivity.CPU]) if step == 2 else contextlib.nullcontext() as prof:
                loss = model(torch.randn(8, 4)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    assert session.cache.grad_norms is None  # nothing is held past the hook that computed it
    return sum(e.count for e in prof.key_averages() if e.key == "aten::_foreach_norm")


def test_the_watchers_of_a_sampled_step_pre_hook_measure_the_gradients_once():
    # nonfinite, grad_health and gradient_flow each read every gradient's norm in the step pre-hook
    assert [_sampled_step_norm_ops([w]) for w in ("nonfinite", "grad_health", "gradient_flow")] == [1, 1, 1]
    assert _sampled_step_norm_ops(["nonfinite", "grad_health", "gradient_flow"]) == 1


def test_surely_finite_shows_finite_gradients_and_never_hides_a_non_finite_one():
    from torchpact.watch.watchers._batched import FLAT, surely_finite

    inf, nan = float("inf"), float("nan")
    small = [torch.randn(8, 4), torch.randn(4), torch.randn(1, 4)]
    assert surely_finite(small)
    for bad in (nan, inf, -inf):
        spoiled = [t.clone() for t in small]
        spoiled[1][2] = bad
        assert not surely_finite(spoiled)
    assert not surely_finite([torch.tensor([inf]), torch.tensor([-inf])])  # inf - inf is NaN, still not finite
    assert not surely_finite([torch.full((4,), 3e38)])  # the sum overflows: not shown, so each is looked at
    assert surely_finite([torch.full((4,), 6e4, dtype=torch.float16)])  # half precision summed in float32
    assert not surely_finite([torch.randn(4), torch.randn(4, dtype=torch.float64)])  # mixed dtypes: not tried
    big = [torch.randn(FLAT + 1), torch.randn(3), torch.randn(2, FLAT), torch.randn(5)]  # summed alone, and the rest
    assert surely_finite(big)
    for i, at in ((0, FLAT), (1, 2), (2, 7), (3, 4)):
        spoiled = [t.clone() for t in big]
        spoiled[i].view(-1)[at] = nan
        assert not surely_finite(spoiled)
    apart = [torch.zeros(FLAT + 1), torch.zeros(FLAT + 2)]  # two sums stacked: inf and -inf in different tensors
    apart[0][3], apart[1][5] = inf, -inf
    assert not surely_finite(apart) and surely_finite([torch.ones(FLAT + 1), torch.ones(FLAT + 2)])
    assert not surely_finite([torch.full((FLAT + 1,), 3e38)])  # a big tensor's own sum overflows
    assert not surely_finite([torch.randn(4), torch.randn(4, device="meta")])  # another device: not tried
    assert not surely_finite([torch.zeros(3, dtype=torch.cfloat)])  # complex: not tried
