CLAIM = "`DistributedDataParallel(..., find_unused_parameters=True)` makes each training step several times slower."
EXPECTED = "false"
REQUIRES = "distributed-cpu"

STEPS = 30


def _on_rank(rank: int) -> dict:
    import statistics
    import time

    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from torchpact.facts.catalogue.distributed._helpers import all_reduces_per_step, rank_batch

    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 256), nn.ReLU(),
                             *[m for _ in range(4) for m in (nn.Linear(256, 256), nn.ReLU())],
                             nn.Linear(256, 2))

    ddps = {"default": DDP(model()), "find_unused_parameters=True": DDP(model(), find_unused_parameters=True)}
    times = {name: [] for name in ddps}
    for step in range(STEPS):  # alternate the two, so that load on the machine hits both alike
        for name, ddp in ddps.items():
            x = rank_batch(rank, step).repeat(8, 1)
            start = time.perf_counter()
            ddp(x).pow(2).mean().backward()
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(t[5:]) for name, t in times.items()}  # after warm-up
    out = {"ratio": median["find_unused_parameters=True"] / median["default"]}
    for name, ddp in ddps.items():
        out[f"{name}: all-reduces per step"] = all_reduces_per_step(ddp, rank)
    return out


def run() -> str:
    from torchpact.facts.ranks import on_ranks

    results = on_ranks(_on_rank)
    ratio = max(r["ratio"] for r in results)
    for key, value in results[0].items():
        if key != "ratio":
            print(f"rank 0, {key}: {value}")
    # The ratio itself depends on the machine and its load: the evidence says only on which side of 2x it is.
    print(f"median step time with the flag is below twice the default on every rank: {ratio < 2}")
    return "true" if ratio >= 2 else "false"
