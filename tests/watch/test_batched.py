"""The batched per-tensor reductions of ``watchers/_batched.py`` agree with one op per tensor."""

from __future__ import annotations

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
