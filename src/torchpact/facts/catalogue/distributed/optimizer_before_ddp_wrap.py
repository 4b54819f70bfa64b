CLAIM = ("The optimizer may be created before wrapping the model in `DistributedDataParallel`: DDP keeps "
         "the same Parameter objects, so the optimizer updates what DDP synchronises.")
EXPECTED = "true"
REQUIRES = "distributed-cpu"


def _on_rank(rank: int) -> dict:
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from torchpact.facts.catalogue.distributed._helpers import in_sync, net, rank_batch

    model = net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # before wrapping
    ddp = DDP(model)
    wrapped, optimized = list(ddp.parameters()), optimizer.param_groups[0]["params"]
    same_objects = len(wrapped) == len(optimized) and all(a is b for a, b in zip(wrapped, optimized, strict=True))
    before = [p.detach().clone() for p in model.parameters()]
    for step in range(2):
        optimizer.zero_grad()
        ddp(rank_batch(rank, step)).pow(2).mean().backward()
        optimizer.step()
    moved = any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    return {"same Parameter objects in DDP and the optimizer": same_objects,
            "parameters updated": moved, "parameters in sync across ranks": in_sync(model.parameters()),
            "nn.Module is DDP's module": isinstance(ddp.module, nn.Module) and ddp.module is model}


def run() -> str:
    from torchpact.facts.ranks import on_ranks

    results = on_ranks(_on_rank)
    for rank, result in enumerate(results):
        print(f"rank {rank}: " + ", ".join(f"{k}: {v}" for k, v in result.items()))
    return "true" if all(all(r.values()) for r in results) else "false"
