CLAIM = ("BatchNorm under `DistributedDataParallel` normalises each rank's batch with that rank's own "
         "statistics, and the running statistics kept are rank 0's (it is not `SyncBatchNorm`).")
EXPECTED = "true"
REQUIRES = "distributed-cpu"


def _on_rank(rank: int) -> dict:
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from torchpact.facts.catalogue.distributed._helpers import rank_batch, same_on_all_ranks

    torch.manual_seed(0)
    bn = nn.BatchNorm1d(4)
    ddp = DDP(bn)
    alone = nn.BatchNorm1d(4)  # what one process fed only rank 0's batches computes
    local = []
    for step in range(3):
        x = rank_batch(rank, step) + 5.0 * rank  # the ranks' data differ by a shift
        y = ddp(x)
        local.append(torch.allclose(y, (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + bn.eps), atol=1e-5))
        alone(rank_batch(0, step))
    ddp.eval()
    with torch.no_grad():
        y = ddp(torch.ones(2, 4))  # DDP broadcasts rank 0's buffers at the start of each forward
    return {"output normalised with local statistics": all(local),
            "eval outputs in sync": same_on_all_ranks(y),
            "running_mean == rank 0's alone": torch.allclose(bn.running_mean, alone.running_mean)}


def run() -> str:
    from torchpact.facts.ranks import on_ranks

    results = on_ranks(_on_rank)
    for rank, result in enumerate(results):
        print(f"rank {rank}: " + ", ".join(f"{k}: {v}" for k, v in result.items()))
    ok = all(r["output normalised with local statistics"] and r["running_mean == rank 0's alone"]
             and r["eval outputs in sync"] for r in results)
    return "true" if ok else "false"
