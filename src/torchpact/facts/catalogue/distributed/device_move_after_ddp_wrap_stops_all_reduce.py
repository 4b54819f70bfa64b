CLAIM = ("Moving a module to another device after wrapping it in `DistributedDataParallel` silently stops the "
         "gradient all-reduce: no error, and the replicas drift apart.")
EXPECTED = "true"
REQUIRES = "distributed-cpu"


def _hook_calls(ddp, model, move=None) -> int:
    """DDP communication-hook calls over two forward + backward passes, after ``move``."""
    import torch

    calls = []

    def hook(state, bucket):
        calls.append(1)
        future = torch.futures.Future()
        future.set_result(bucket.buffer())
        return future

    ddp.register_comm_hook(None, hook)
    if move is not None:
        move()
    device = next(model.parameters()).device
    for _ in range(2):
        ddp(torch.randn(8, 4, device=device)).sum().backward()
    return len(calls)


def _on_rank(rank: int) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from torchpact.facts.catalogue.distributed._helpers import net

    out = {"DDP(model)": _hook_calls(DDP(model := net()), model)}
    ddp = DDP(model := net())
    out["DDP(model), then ddp.to('cpu')"] = _hook_calls(ddp, model, lambda: ddp.to("cpu"))
    # the meta device is the one other device a CPU-only build has: a real device change
    ddp = DDP(model := net())
    out["DDP(model), then ddp.to('meta')"] = _hook_calls(ddp, model, lambda: ddp.to("meta"))
    ddp = DDP(model := net())
    out["DDP(model), then model.to('meta')"] = _hook_calls(ddp, model, lambda: model.to("meta"))
    return out


def run() -> str:
    from torchpact.facts.ranks import on_ranks

    results = on_ranks(_on_rank)
    for key, value in results[0].items():
        print(f"rank 0, {key}: {value} hook calls")
    fine = all(r["DDP(model)"] == r["DDP(model), then ddp.to('cpu')"] == 2 for r in results)
    broken = all(r["DDP(model), then ddp.to('meta')"] == r["DDP(model), then model.to('meta')"] == 0 for r in results)
    return "true" if fine and broken else "false"
