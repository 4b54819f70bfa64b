CLAIM = ("Converting a module to another dtype after wrapping it in `DistributedDataParallel` silently "
         "stops the gradient all-reduce: no error, and the replicas drift apart.")
EXPECTED = "true"
REQUIRES = "distributed-cpu"


def _train(ddp, model, rank: int) -> dict:
    import torch

    from torchpact.facts.catalogue.distributed._helpers import in_sync, rank_batch

    dtype = next(model.parameters()).dtype
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    grads, params = [], []
    for step in range(2):
        optimizer.zero_grad()
        ddp(rank_batch(rank, step, dtype)).float().pow(2).mean().backward()
        grads.append(in_sync(p.grad for p in model.parameters()))
        optimizer.step()
        params.append(in_sync(model.parameters()))
    return {"grads in sync": grads, "params in sync": params}


def _on_rank(rank: int) -> dict:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from torchpact.facts.catalogue.distributed._helpers import all_reduces_per_step, net

    out = {"DDP(model)": _train(DDP(model := net()), model, rank)}
    ddp = DDP(model := net())
    model.double()
    out["DDP(model), then model.double()"] = _train(ddp, model, rank)
    ddp = DDP(model := net())
    model.to(torch.bfloat16)
    out["DDP(model), then model.to(torch.bfloat16)"] = _train(ddp, model, rank)
    model = net().double()
    out["model.double(), then DDP(model)"] = _train(DDP(model), model, rank)
    ddp = DDP(model := net())
    model.double()
    out["all-reduces per step after model.double()"] = all_reduces_per_step(ddp, rank, dtype=torch.float64)
    return out


def run() -> str:
    from torchpact.facts.ranks import on_ranks

    results = on_ranks(_on_rank)
    for key, value in results[0].items():
        print(f"rank 0, {key}: {value}")
    broken = all(r["DDP(model), then model.double()"]["grads in sync"] == [False, False]
                 and r["DDP(model), then model.to(torch.bfloat16)"]["params in sync"] == [False, False]
                 and r["all-reduces per step after model.double()"] == 0 for r in results)
    fine = all(r["DDP(model)"]["grads in sync"] == r["model.double(), then DDP(model)"]["grads in sync"] == [True, True]
               for r in results)
    return "true" if broken and fine else "false"
