CLAIM = "`nn.DataParallel` splits the batch over the GPUs and gathers every replica's output on the first GPU."
EXPECTED = "true"
REQUIRES = "multi-gpu"


def run() -> str:
    import torch
    from torch import nn

    seen = []

    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            seen.append((str(x.device), x.shape[0]))
            return self.fc(x)

    devices = list(range(2))
    model = nn.DataParallel(Probe().cuda(0), device_ids=devices)
    out = model(torch.randn(8, 4, device="cuda:0"))
    torch.cuda.synchronize()
    print(f"rows per replica: {sorted(seen)}")
    print(f"output on {out.device}, shape {tuple(out.shape)}")
    split = sorted(seen) == [("cuda:0", 4), ("cuda:1", 4)]
    return "true" if split and out.device == torch.device("cuda:0") and out.shape[0] == 8 else "false"
