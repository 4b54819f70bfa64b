CLAIM = "`torch.cuda.memory_summary()` defragments or frees GPU memory."
EXPECTED = "false"
REQUIRES = "cuda"

KEYS = ("allocated_bytes.all.current", "reserved_bytes.all.current", "segment.all.current",
        "inactive_split.all.current", "num_alloc_retries")


def run() -> str:
    import torch

    blocks = [torch.empty(2**18, device="cuda") for _ in range(16)]
    del blocks[::2]  # free every other block: the cached segment is now fragmented
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()
    summary = torch.cuda.memory_summary()
    after = torch.cuda.memory_stats()
    for key in KEYS:
        print(f"{key} unchanged by memory_summary(): {before.get(key) == after.get(key)}")
    print(f"memory_summary() returns {type(summary).__name__}: a report to print")
    changed = any(before.get(key) != after.get(key) for key in KEYS)
    return "true" if changed else "false"
