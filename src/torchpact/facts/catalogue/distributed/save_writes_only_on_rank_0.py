CLAIM = "`torch.save` in a DDP script writes only on rank 0."
EXPECTED = "false"
REQUIRES = "distributed-cpu"


def _on_rank(rank: int) -> dict:
    import os
    import shutil
    import tempfile

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from torchpact.facts.catalogue.distributed._helpers import net

    folder = [tempfile.mkdtemp() if rank == 0 else None]
    dist.broadcast_object_list(folder, src=0)
    path = os.path.join(folder[0], "model.pt")
    model = DDP(net())
    for turn in range(2):  # one rank after the other, so that the last write is known
        if turn == rank:
            torch.save({"saved_by": rank, "state": model.module.state_dict()}, path)  # no rank guard
        dist.barrier()
    saved_by = torch.load(path)["saved_by"]
    dist.barrier()
    if rank == 0:
        shutil.rmtree(folder[0])
    return {"file saved by": saved_by}


def run() -> str:
    from torchpact.facts.ranks import on_ranks

    results = on_ranks(_on_rank)
    for rank, result in enumerate(results):
        print(f"rank {rank}: " + ", ".join(f"{k}: {v}" for k, v in result.items()))
    # rank 1 saved last: if its torch.save had done nothing, the file would hold rank 0's save
    return "false" if all(r["file saved by"] == 1 for r in results) else "true"
