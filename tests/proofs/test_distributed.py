"""Proofs for distributed rules: each pitfall runs in a real 2-rank gloo process group on CPU.

Starting processes dominates the cost (importing torch twice), so one 2-rank job runs every
scenario below, each in its own function, and the tests assert on what each rank reported. The
job has a hard deadline and every collective a timeout, so a broken scenario fails, never hangs.
"""

from __future__ import annotations

import collections
import datetime
import gc
import os
import pickle
import tempfile
import time
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

WORLD = 2
# Bounds against a hang, not expectations of speed: a loaded 2-core machine needed over 90 s here.
DEADLINE_S = 600
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=180)


# ---------------------------------------------------------------------------------------- helpers
def _same_on_all_ranks(tensor: torch.Tensor) -> bool:
    local = tensor.detach().double().contiguous()
    gathered = [torch.zeros_like(local) for _ in range(WORLD)]
    dist.all_gather(gathered, local)
    return all(torch.equal(gathered[0], g) for g in gathered[1:])


def _grads_in_sync(model: nn.Module) -> bool:
    return all(_same_on_all_ranks(p.grad) for p in model.parameters())


def _params_in_sync(model: nn.Module) -> bool:
    return all(_same_on_all_ranks(p) for p in model.parameters())


def _rank_batch(rank: int, step: int, dtype=torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1000 * step + rank)  # different data on each rank
    return torch.randn(8, 4, generator=generator).to(dtype)


def _train(ddp: nn.Module, model: nn.Module, rank: int, *, steps: int = 2, through_module: bool = False) -> dict:
    """A few SGD steps; whether gradients and parameters agree across ranks after each."""
    dtype = next(model.parameters()).dtype
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    grads, params = [], []
    for step in range(steps):
        optimizer.zero_grad()
        forward = ddp.module if through_module else ddp
        forward(_rank_batch(rank, step, dtype)).float().pow(2).mean().backward()
        grads.append(_grads_in_sync(model))
        optimizer.step()
        params.append(_params_in_sync(model))
    return {"dtype": str(dtype), "grads_in_sync": grads, "params_in_sync": params}


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


# -------------------------------------------------------------------------------------- scenarios
def scenario_convert_after_wrap(rank: int, tmp: Path) -> dict:
    out = {"baseline": _train(ddp := DDP(model := _net()), model, rank)}

    ddp = DDP(model := _net())
    model.double()                                      # the pitfall
    out["model.double() after DDP"] = _train(ddp, model, rank)

    ddp = DDP(model := _net())
    model.to(torch.bfloat16)
    out["model.to(bfloat16) after DDP"] = _train(ddp, model, rank)

    ddp = DDP(model := _net())
    ddp.module.half()
    out["ddp.module.half() after DDP"] = _train(ddp, model, rank)

    ddp = DDP(model := _net()).double()
    out["DDP(model).double()"] = _train(ddp, model, rank)

    ddp = DDP(model := _net())
    model.float()                                       # float32 -> float32: a no-op
    model.to("cpu")                                     # same device: a no-op
    out["no-op float()/to(cpu) after DDP"] = _train(ddp, model, rank)

    model = _net().double()
    out["double() before DDP"] = _train(DDP(model), model, rank)

    ddp = DDP(model := _net())
    model.double()
    out["all_reduces_per_step after double()"] = _all_reduces_per_step(ddp, rank, dtype=torch.float64)

    # The mechanism: a dtype change gives each parameter a new gradient accumulator (DDP's hooks
    # stay on the old one); a same-dtype "conversion" keeps it.
    weight = (model := _net())[0].weight
    accumulator = weight.view_as(weight).grad_fn.next_functions[0][0]
    model.float()
    out["accumulator kept by float()"] = weight.view_as(weight).grad_fn.next_functions[0][0] is accumulator
    model.double()
    out["accumulator kept by double()"] = weight.view_as(weight).grad_fn.next_functions[0][0] is accumulator
    return out


def _hooked_backwards(ddp: DDP, model: nn.Module, move=None, steps: int = 2) -> dict:
    """Communication hook calls over ``steps`` forward + backward passes through ``ddp``, after ``move``."""
    calls = []

    def hook(state, bucket):
        calls.append(1)
        future = torch.futures.Future()
        future.set_result(bucket.buffer())
        return future

    ddp.register_comm_hook(None, hook)
    weight = next(model.parameters())
    accumulator = weight.view_as(weight).grad_fn.next_functions[0][0]
    if move is not None:
        move()
    now = next(model.parameters())
    for _ in range(steps):
        ddp(torch.randn(8, 4, device=now.device)).sum().backward()
    return {"device": str(now.device), "hook_calls": len(calls), "same parameters": now is weight,
            "accumulator kept": now.view_as(now).grad_fn.next_functions[0][0] is accumulator}


def scenario_move_after_wrap(rank: int, tmp: Path) -> dict:
    out = {"no move": _hooked_backwards(ddp := DDP(model := _net()), model)}
    out["ddp.to(cpu) after DDP"] = _hooked_backwards(ddp := DDP(model := _net()), model, lambda: ddp.to("cpu"))
    # a real device change: the meta device is the one other device a CPU-only build has
    out["ddp.to(meta) after DDP"] = _hooked_backwards(ddp := DDP(model := _net()), model, lambda: ddp.to("meta"))
    out["model.to(meta) after DDP"] = _hooked_backwards(ddp := DDP(model := _net()), model, lambda: model.to("meta"))
    try:
        DDP(_net(), device_ids=[0])
        out["CPU module with device_ids"] = "accepted"
    except ValueError as exc:
        out["CPU module with device_ids"] = str(exc)
    return out


def scenario_forward_through_module(rank: int, tmp: Path) -> dict:
    out = {"ddp(x)": _train(ddp := DDP(model := _net()), model, rank)}
    out["ddp.module(x)"] = _train(DDP(model := _net()), model, rank, through_module=True)
    out["all_reduces_per_step through ddp.module"] = _all_reduces_per_step(DDP(_net()).module, rank)

    # Local micro-steps through .module, then one step through DDP: the last backward all-reduces
    # the accumulated .grad (the pattern the rule deliberately leaves alone).
    ddp = DDP(model := _net())
    ddp.module(_rank_batch(rank, 0)).pow(2).mean().backward()
    ddp(_rank_batch(rank, 1)).pow(2).mean().backward()
    mixed = [p.grad.clone() for p in model.parameters()]
    reference = _net()
    reference(_rank_batch(rank, 0)).pow(2).mean().backward()
    reference(_rank_batch(rank, 1)).pow(2).mean().backward()
    expected = [p.grad.clone() for p in reference.parameters()]
    for g in expected:
        dist.all_reduce(g)
        g /= WORLD
    out["micro-steps then ddp(x)"] = {
        "grads_in_sync": _grads_in_sync(model),
        "equals averaged sum": all(torch.allclose(a, b, atol=1e-6) for a, b in zip(mixed, expected, strict=True)),
    }
    return out


def scenario_save_on_every_rank(rank: int, tmp: Path) -> dict:
    model = DDP(_net())
    path = tmp / "model.pt"
    dist.barrier()
    reached = []
    torch.save({"saved_by": rank, "state": model.module.state_dict()}, path)  # the pitfall: no guard
    reached.append(str(path))
    dist.barrier()
    on_disk = torch.load(path)["saved_by"]
    dist.barrier()

    guarded = tmp / "guarded.pt"
    wrote_guarded = False
    if dist.get_rank() == 0:
        torch.save({"saved_by": rank}, guarded)
        wrote_guarded = True
    dist.barrier()
    return {"reached_save_on": reached, "file_saved_by": on_disk, "wrote_guarded": wrote_guarded,
            "guarded_saved_by": torch.load(guarded)["saved_by"]}


def _all_reduces_per_step(ddp: nn.Module, rank: int, steps: int = 4, dtype=torch.float32) -> float:
    """``gloo:all_reduce`` calls per forward + backward through ``ddp``, counted by the profiler."""
    from torch.profiler import ProfilerActivity, profile

    for step in range(2):  # warm up: DDP rebuilds its buckets after the first iteration
        ddp(_rank_batch(rank, step, dtype)).sum().backward()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for step in range(steps):
            ddp(_rank_batch(rank, step, dtype)).sum().backward()
    counts = collections.Counter(e.name for e in prof.events())
    return counts["gloo:all_reduce"] / steps


class _FrozenBranch(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.used = nn.Linear(4, 2)
        self.unused = nn.Linear(4, 2)  # never reached in forward

    def forward(self, x):
        return self.used(x)


def _stderr_and_warnings(fn) -> tuple[object, str]:
    """Run ``fn`` and return its result with what it wrote to fd 2 (C++ warnings) or warned."""
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        os.dup2(capture.fileno(), 2)
        try:
            result = fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        text = capture.read().decode(errors="replace")
    return result, text + "\n".join(str(w.message) for w in caught)


def scenario_find_unused_parameters(rank: int, tmp: Path) -> dict:
    with_flag, logged = _stderr_and_warnings(
        lambda: _all_reduces_per_step(DDP(_net(), find_unused_parameters=True), rank))
    out = {
        "all_reduces_per_step": {
            "default": _all_reduces_per_step(DDP(_net()), rank),
            "find_unused_parameters=True": with_flag,
            "static_graph=True": _all_reduces_per_step(DDP(_net(), static_graph=True), rank),
        },
        "logged": " ".join(logged.split()),
    }
    # With a parameter that never gets a gradient: the default fails, both options cope.
    ddp = DDP(_FrozenBranch())
    try:
        for step in range(2):
            ddp(_rank_batch(rank, step)).sum().backward()
        out["unused param, default"] = "ran"
    except RuntimeError as exc:
        out["unused param, default"] = str(exc)
    dist.barrier()
    for option in ("find_unused_parameters", "static_graph"):
        model = _FrozenBranch()
        ddp = DDP(model, **{option: True})
        for step in range(3):
            model.zero_grad()
            ddp(_rank_batch(rank, step)).sum().backward()
        out[f"unused param, {option}=True"] = {
            "used grads in sync": _grads_in_sync(model.used),
            "all_reduces_per_step": _all_reduces_per_step(ddp, rank),
        }
    return out


def scenario_batchnorm(rank: int, tmp: Path) -> dict:
    out = {}
    for sync in (None, False):
        torch.manual_seed(0)
        model = nn.Sequential(nn.BatchNorm1d(4), nn.Linear(4, 2))
        ddp = DDP(model) if sync is None else DDP(model, forward_sync_buffers=sync)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        rank0_alone = nn.BatchNorm1d(4)  # what a single process fed only rank 0's batches computes
        running_in_sync, batch_means = [], []
        for step in range(3):
            x = _rank_batch(rank, step) + 5.0 * rank  # the ranks' data differ by a shift
            out_ = ddp(x)
            batch_means.append(float(x.mean()))
            out_.pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            running_in_sync.append(_same_on_all_ranks(model[0].running_mean))
            rank0_alone(_rank_batch(0, step))
        ddp.eval()
        with torch.no_grad():
            eval_out = ddp(torch.ones(2, 4))  # default: rank 0's buffers are broadcast first
        out["default" if sync is None else "forward_sync_buffers=False"] = {
            "running_mean in sync after each step": running_in_sync,
            "eval outputs in sync": _same_on_all_ranks(eval_out),
            "final running_mean == rank 0 alone": torch.equal(model[0].running_mean, rank0_alone.running_mean),
        }
    # In training mode each rank normalises with its own batch statistics.
    torch.manual_seed(0)
    bn = nn.BatchNorm1d(4)
    ddp = DDP(bn)
    x = _rank_batch(rank, 0) + 5.0 * rank
    y = ddp(x)
    local = (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + bn.eps)
    out["train output == local batch norm"] = torch.allclose(y, local, atol=1e-5)
    out["train output mean ~ 0 on every rank"] = bool(y.mean(0).abs().max() < 1e-5)
    try:
        DDP(nn.SyncBatchNorm.convert_sync_batchnorm(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))))
        out["SyncBatchNorm on CPU"] = "ran"
    except ValueError as exc:
        out["SyncBatchNorm on CPU"] = str(exc)
    return out


SCENARIOS = {
    "convert_after_wrap": scenario_convert_after_wrap,
    "move_after_wrap": scenario_move_after_wrap,
    "forward_through_module": scenario_forward_through_module,
    "save_on_every_rank": scenario_save_on_every_rank,
    "find_unused_parameters": scenario_find_unused_parameters,
    "batchnorm": scenario_batchnorm,
}


# ------------------------------------------------------------------------------------- the job
def _worker(rank: int, tmp: str) -> None:
    torch.set_num_threads(1)
    # A FileStore: a TCP port found free beforehand can be taken by a parallel test before rank 0 binds it.
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=WORLD,
                            timeout=COLLECTIVE_TIMEOUT)
    results = {}
    try:
        for name, scenario in SCENARIOS.items():
            try:
                results[name] = scenario(rank, Path(tmp))
            except Exception as exc:  # reported by the test that needs it
                results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            gc.collect()  # DDP reducers must go before the process group does
            dist.barrier()
    finally:
        with open(os.path.join(tmp, f"rank{rank}.pkl"), "wb") as f:
            pickle.dump(results, f)
        gc.collect()
        dist.destroy_process_group()
    # Results are on disk and the group is down: skip the ~2 s interpreter teardown of torch.
    os._exit(0)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    """Every scenario's result, per rank: ``ranks[r][scenario]``."""
    tmp = tmp_path_factory.mktemp("ddp")
    context = mp.start_processes(_worker, args=(str(tmp),), nprocs=WORLD, join=False,
                                 start_method="spawn")
    deadline = time.monotonic() + DEADLINE_S
    try:
        while not context.join(timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                pytest.fail(f"the 2-rank gloo job did not finish in {DEADLINE_S} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    results = []
    for rank in range(WORLD):
        with open(tmp / f"rank{rank}.pkl", "rb") as f:
            results.append(pickle.load(f))
    return results


def _scenario(ranks: list[dict], name: str) -> list[dict]:
    per_rank = [r[name] for r in ranks]
    for r, result in enumerate(per_rank):
        assert "error" not in result, f"rank {r}: {result}"
    return per_rank


# ------------------------------------------------------------------------------------- the proofs
@pytest.mark.proves("TP601")
def test_dtype_conversion_after_ddp_wrap_silently_stops_gradient_all_reduce(ranks):
    for result in _scenario(ranks, "convert_after_wrap"):
        assert result["baseline"]["grads_in_sync"] == [True, True]
        for case in ("model.double() after DDP", "model.to(bfloat16) after DDP", "ddp.module.half() after DDP",
                     "DDP(model).double()"):
            # no error, no warning: just no all-reduce, so every rank keeps its local gradient
            assert result[case]["grads_in_sync"] == [False, False], case
            assert result[case]["params_in_sync"] == [False, False], case  # the replicas drift apart
        assert result["model.double() after DDP"]["dtype"] == "torch.float64"
        assert result["no-op float()/to(cpu) after DDP"]["grads_in_sync"] == [True, True]
        assert result["double() before DDP"]["grads_in_sync"] == [True, True]
        assert result["double() before DDP"]["params_in_sync"] == [True, True]
        assert result["all_reduces_per_step after double()"] == 0.0  # not a single collective
        assert result["accumulator kept by float()"] and not result["accumulator kept by double()"]


@pytest.mark.proves("TP606")
def test_device_move_after_ddp_wrap_silently_stops_gradient_all_reduce(ranks):
    for result in _scenario(ranks, "move_after_wrap"):
        kept = {"device": "cpu", "hook_calls": 2, "same parameters": True, "accumulator kept": True}
        assert result["no move"] == kept
        assert result["ddp.to(cpu) after DDP"] == kept  # no device change: a no-op
        for case in ("ddp.to(meta) after DDP", "model.to(meta) after DDP"):
            # no error, no warning: the backward passes run, and not one of them communicates
            assert result[case] == {"device": "meta", "hook_calls": 0, "same parameters": False,
                                    "accumulator kept": False}, case
        assert "only work with single-device/multiple-device GPU modules or CPU modules" in result[
            "CPU module with device_ids"]


@pytest.mark.proves("TP602")
def test_forward_through_ddp_module_skips_gradient_all_reduce(ranks):
    for result in _scenario(ranks, "forward_through_module"):
        assert result["ddp(x)"]["grads_in_sync"] == [True, True]
        assert result["ddp.module(x)"]["grads_in_sync"] == [False, False]
        assert result["ddp.module(x)"]["params_in_sync"] == [False, False]
        assert result["all_reduces_per_step through ddp.module"] == 0.0
        assert result["micro-steps then ddp(x)"] == {"grads_in_sync": True, "equals averaged sum": True}


@pytest.mark.proves("TP603")
def test_unguarded_torch_save_runs_on_every_rank(ranks):
    per_rank = _scenario(ranks, "save_on_every_rank")
    paths = [r["reached_save_on"] for r in per_rank]
    assert len(paths[0]) == 1 and paths == [paths[0]] * WORLD  # every rank saved, to the one path
    survivor = {r["file_saved_by"] for r in per_rank}
    assert len(survivor) == 1 and survivor <= set(range(WORLD))  # one write survives, the rest was wasted
    assert [r["wrote_guarded"] for r in per_rank] == [True, False]
    assert {r["guarded_saved_by"] for r in per_rank} == {0}


@pytest.mark.proves("TP604")
def test_find_unused_parameters_adds_an_all_reduce_every_step(ranks):
    for result in _scenario(ranks, "find_unused_parameters"):
        per_step = result["all_reduces_per_step"]
        assert per_step["default"] == 1.0  # one gradient bucket for this small model
        assert per_step["find_unused_parameters=True"] == 2.0  # + the used-parameter map
        assert per_step["static_graph=True"] == 1.0
        assert "This flag results in an extra traversal of the autograd graph every iteration" in result["logged"]
        assert result["unused param, default"].startswith(
            "Expected to have finished reduction in the prior iteration before starting a new one")
        for option in ("find_unused_parameters", "static_graph"):
            assert result[f"unused param, {option}=True"]["used grads in sync"]
        assert result["unused param, find_unused_parameters=True"]["all_reduces_per_step"] == 2.0
        assert result["unused param, static_graph=True"]["all_reduces_per_step"] == 1.0


@pytest.mark.proves("TP605")
def test_batchnorm_under_ddp_uses_per_rank_statistics(ranks):
    per_rank = _scenario(ranks, "batchnorm")
    for result in per_rank:
        default = result["default"]
        assert default["running_mean in sync after each step"] == [False, False, False]
        assert default["eval outputs in sync"]  # rank 0's buffers are broadcast at each forward...
        assert default["final running_mean == rank 0 alone"]  # ...so rank 1's data never count
        unsynced = result["forward_sync_buffers=False"]
        assert unsynced["running_mean in sync after each step"] == [False, False, False]
        assert not unsynced["eval outputs in sync"]  # diverged for good
        assert result["train output == local batch norm"] and result["train output mean ~ 0 on every rank"]
        assert result["SyncBatchNorm on CPU"] == "SyncBatchNorm layers only work with GPU modules"
    assert [r["forward_sync_buffers=False"]["final running_mean == rank 0 alone"] for r in per_rank] == [True, False]
