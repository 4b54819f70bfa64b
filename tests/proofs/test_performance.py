"""Proofs for performance rules. Their cost is paid on the GPU, so the proofs that show it run only
where CUDA is available (the rules say so in their ``proof``); what holds on CPU is checked here too."""

from __future__ import annotations

import pytest
import torch

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_empty_cache_without_cuda_initialised_is_a_no_op():
    # Where CUDA was never initialised (any CPU-only machine), empty_cache() neither fails nor
    # initialises CUDA: it returns at once. Its cost exists only on a GPU (proof below).
    if torch.cuda.is_initialized():
        pytest.skip("another test initialised CUDA in this process")
    torch.cuda.empty_cache()
    assert not torch.cuda.is_initialized()


def _train_steps(n: int, empty_cache: bool) -> int:
    """cudaMalloc calls (new allocator segments) made by ``n`` warm training steps."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        model(torch.randn(256, 1024, device="cuda")).pow(2).mean().backward()
        opt.step()

    step()  # warm-up: the blocks every later step needs are now cached
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["segment.all.allocated"]
    for _ in range(n):
        step()
        if empty_cache:
            in_use = torch.cuda.memory_allocated()
            torch.cuda.empty_cache()
            assert torch.cuda.memory_allocated() == in_use  # it frees nothing that is in use
    torch.cuda.synchronize()
    return torch.cuda.memory_stats()["segment.all.allocated"] - before


@needs_cuda
@pytest.mark.proves("TP901")
def test_empty_cache_every_step_makes_the_allocator_cudamalloc_every_step():
    torch.cuda.empty_cache()
    assert _train_steps(5, empty_cache=False) <= 1  # the cache serves every step
    torch.cuda.empty_cache()
    assert _train_steps(5, empty_cache=True) >= 5  # at least one fresh cudaMalloc per step


@needs_cuda
@pytest.mark.proves("TP902")
def test_reading_a_loss_on_the_host_synchronises_with_the_gpu():
    model = torch.nn.Linear(64, 1).cuda()
    loss = model(torch.randn(32, 64, device="cuda")).pow(2).mean()
    loss.backward()
    running = torch.zeros((), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        running += loss.detach()  # stays on the device: no sync
        for read in (lambda: loss.item(), lambda: float(loss), lambda: loss.detach().cpu(),
                     lambda: loss.tolist(), lambda: print(loss)):
            with pytest.raises(RuntimeError, match="synchroniz"):
                read()
    finally:
        torch.cuda.set_sync_debug_mode(0)
