CLAIM = ("Reading a CUDA tensor on the host (`.item()`, `float()`, `.cpu()`, `.tolist()`, `print`) makes "
         "the host wait for the GPU; adding it into a CUDA tensor does not.")
EXPECTED = "true"
REQUIRES = "cuda"


def run() -> str:
    import io

    import torch

    x = torch.randn(256, 256, device="cuda")
    loss = (x @ x).pow(2).mean()
    running = torch.zeros((), device="cuda")
    torch.cuda.synchronize()
    reads = {"loss.item()": lambda: loss.item(), "float(loss)": lambda: float(loss),
             "loss.cpu()": lambda: loss.cpu(), "loss.tolist()": lambda: loss.tolist(),
             "print(loss)": lambda: print(loss, file=io.StringIO()),
             "running += loss.detach()": lambda: running.add_(loss.detach())}
    synced = {}
    torch.cuda.set_sync_debug_mode("error")  # a synchronising call raises instead of waiting
    try:
        for name, read in reads.items():
            try:
                read()
                synced[name] = False
            except RuntimeError as exc:
                synced[name] = "synchroniz" in str(exc)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    for name, s in synced.items():
        print(f"{name} synchronises: {s}")
    host = [s for name, s in synced.items() if name != "running += loss.detach()"]
    return "true" if all(host) and not synced["running += loss.detach()"] else "false"
