CLAIM = "A 1080p RGB frame in float32 takes about 24 MiB."
EXPECTED = "true"


def run() -> str:
    import torch

    frame = torch.empty(3, 1080, 1920, dtype=torch.float32)
    nbytes = frame.untyped_storage().nbytes()
    mib = nbytes / 2**20
    print(f"torch.empty(3, 1080, 1920): {nbytes} bytes = {mib:.2f} MiB")
    print(f"as uint8: {torch.empty(3, 1080, 1920, dtype=torch.uint8).untyped_storage().nbytes() / 2**20:.2f} MiB")
    print(f"a batch of 32 in float32: {32 * mib / 1024:.2f} GiB")
    return "true" if 23 <= mib <= 25 else "false"
