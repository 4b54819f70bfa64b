"""The batched per-tensor reductions of ``watchers/_batched.py`` agree with one op per tensor."""

from __future__ import annotations

import math

import torch

from torchpact.watch.watchers._batched import all_zero, max_abs, read

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
        torch.tensor([1e-200], dtype=torch.float64),
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


def test_max_abs_matches_abs_max_per_tensor_as_float32_nan_included():
    tensors = _corners()
    expected = [t.abs().max().float().item() for t in tensors]
    got = max_abs(tensors)
    assert [math.isnan(v) for v in got] == [math.isnan(v) for v in expected]
    assert [v for v in got if not math.isnan(v)] == [v for v in expected if not math.isnan(v)]


def test_read_gives_each_value_as_its_float32_value_in_order():
    values = [torch.tensor(0.1, dtype=torch.float64), torch.tensor(True), torch.tensor(2.5, dtype=torch.bfloat16),
              torch.tensor(1e-50, dtype=torch.float64)]
    assert read(values) == [v.float().item() for v in values]
    assert read(values)[-1] == 0.0  # float32, like the one-op-per-tensor reads it replaces
