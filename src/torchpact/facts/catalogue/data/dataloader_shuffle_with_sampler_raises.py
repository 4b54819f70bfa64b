CLAIM = "`DataLoader(..., shuffle=True, sampler=...)` raises `ValueError` instead of ignoring one of them."
EXPECTED = "true"


def run() -> str:
    from torch.utils.data import DataLoader, SequentialSampler

    dataset = list(range(8))
    try:
        DataLoader(dataset, batch_size=2, shuffle=True, sampler=SequentialSampler(dataset))
        print("DataLoader(shuffle=True, sampler=...): ran")
        return "false"
    except ValueError as exc:
        print(f"DataLoader(shuffle=True, sampler=...): ValueError: {exc}")
        return "true"
