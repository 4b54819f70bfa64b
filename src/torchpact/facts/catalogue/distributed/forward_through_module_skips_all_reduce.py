CLAIM = ("Calling `ddp_model.module(x)` instead of `ddp_model(x)` skips DDP's gradient all-reduce: each "
         "rank trains on its own gradients.")
EXPECTED = "true"
REQUIRES = "distributed-cpu"


def _on_rank(rank: int) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from torchpact.facts.catalogue.distributed._helpers import all_reduces_per_step, in_sync, net, rank_batch

    out = {}
    for name, through_module in (("ddp(x)", False), ("ddp.module(x)", True)):
        ddp = DDP(model := net())
        forward = ddp.module if through_module else ddp
        forward(rank_batch(rank, 0)).pow(2).mean().backward()
        out[f"{name}: grads in sync"] = in_sync(p.grad for p in model.parameters())
        out[f"{name}: all-reduces per step"] = all_reduces_per_step(forward, rank)
    return out


def run() -> str:
    from torchpact.facts.ranks import on_ranks

    results = on_ranks(_on_rank)
    for key, value in results[0].items():
        print(f"rank 0, {key}: {value}")
    skipped = all(not r["ddp.module(x): grads in sync"] and r["ddp.module(x): all-reduces per step"] == 0
                  and r["ddp(x): grads in sync"] for r in results)
    return "true" if skipped else "false"
