CLAIM = ("A shuffling `DistributedSampler` yields the same order every epoch unless `sampler.set_epoch(epoch)` "
         "is called.")
EXPECTED = "true"


def run() -> str:
    import torch
    from torch.utils.data import DistributedSampler

    dataset = torch.arange(16)
    sampler = DistributedSampler(dataset, num_replicas=2, rank=0)  # shuffle=True is the default
    epochs = [list(sampler) for _ in range(3)]
    print(f"3 epochs without set_epoch: {epochs}")
    reshuffled = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        reshuffled.append(list(sampler))
    print(f"3 epochs with set_epoch: {reshuffled}")
    same = all(order == epochs[0] for order in epochs)
    return "true" if same and len({tuple(o) for o in reshuffled}) == 3 else "false"
