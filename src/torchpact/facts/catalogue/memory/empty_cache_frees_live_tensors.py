CLAIM = "`torch.cuda.empty_cache()` frees GPU memory that live tensors still use."
EXPECTED = "false"
REQUIRES = "cuda"


def run() -> str:
    import torch

    live = torch.ones(2**24, device="cuda")  # 64 MiB in use
    dead = torch.ones(2**24, device="cuda")
    del dead  # 64 MiB cached by the allocator, used by nothing
    torch.cuda.synchronize()
    allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    print(f"memory_allocated() unchanged: {torch.cuda.memory_allocated() == allocated}")
    print(f"memory_reserved() fell by the cached 64 MiB: {reserved - torch.cuda.memory_reserved() >= 2**26}")
    print(f"the live tensor is intact: {bool((live == 1).all())}")
    return "true" if torch.cuda.memory_allocated() < allocated else "false"
