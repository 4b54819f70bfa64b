CLAIM = ("`DistributedDataParallel` makes every rank start from rank 0's parameters, even when each rank "
         "initialised its model with a different seed.")
EXPECTED = "true"
REQUIRES = "distributed-cpu"


def _on_rank(rank: int) -> dict:
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from torchpact.facts.catalogue.distributed._helpers import in_sync

    torch.manual_seed(rank)  # a different initialisation on each rank
    model = nn.Linear(4, 2)
    torch.manual_seed(0)
    rank0_init = nn.Linear(4, 2)
    before = in_sync(model.parameters())
    DDP(model)
    return {"in sync before DDP": before, "in sync after DDP": in_sync(model.parameters()),
            "equal to rank 0's initialisation": all(torch.equal(a, b) for a, b in  # both nn.Linear(4, 2)
                                                    zip(model.parameters(), rank0_init.parameters(), strict=True))}


def run() -> str:
    from torchpact.facts.ranks import on_ranks

    results = on_ranks(_on_rank)
    for rank, result in enumerate(results):
        print(f"rank {rank}: " + ", ".join(f"{k}: {v}" for k, v in result.items()))
    ok = all(not r["in sync before DDP"] and r["in sync after DDP"] and r["equal to rank 0's initialisation"]
             for r in results)
    return "true" if ok else "false"
