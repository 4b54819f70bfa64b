CLAIM = "`DistributedDataParallel` averages gradients over the ranks (it does not sum them)."
EXPECTED = "true"
REQUIRES = "distributed-cpu"


def _on_rank(rank: int) -> dict:
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    ddp = DDP(model)
    ddp(torch.full((1, 1), float(rank + 1))).sum().backward()  # local gradients: 1 on rank 0, 2 on rank 1
    return {"local gradient": float(rank + 1), "gradient after backward": model.weight.grad.item()}


def run() -> str:
    from torchpact.facts.ranks import on_ranks

    results = on_ranks(_on_rank)
    for rank, result in enumerate(results):
        print(f"rank {rank}: " + ", ".join(f"{k}: {v}" for k, v in result.items()))
    return "true" if all(r["gradient after backward"] == 1.5 for r in results) else "false"
