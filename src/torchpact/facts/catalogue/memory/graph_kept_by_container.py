CLAIM = ("Outputs appended to a list keep their autograd graph (and, until backward, every saved "
         "activation) alive; `.cpu()` does not drop it, `.detach()` does.")
EXPECTED = "true"


class _Saved:
    def __init__(self, tensor):
        self.tensor = tensor.detach()  # a detached alias: the holder cannot keep a graph alive itself


def _alive_after(keep) -> int:
    """Saved activations still alive after 5 forward passes whose outputs went through ``keep``."""
    import weakref

    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    saved, stored = [], []

    def pack(t):
        holder = _Saved(t)
        saved.append(weakref.ref(holder))
        return holder

    for _ in range(5):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda h: h.tensor):
            stored.append(keep(model(torch.randn(8, 16))))
    return sum(r() is not None for r in saved)


def run() -> str:
    kept = {name: _alive_after(keep) for name, keep in (
        ("out", lambda out: out), ("out.cpu()", lambda out: out.cpu()),
        ("out.detach()", lambda out: out.detach()), ("out.sum().item()", lambda out: out.sum().item()))}
    for name, alive in kept.items():
        print(f"stored.append({name}): {alive} saved activations alive after 5 steps")
    ok = kept["out"] == kept["out.cpu()"] > 0 and kept["out.detach()"] == kept["out.sum().item()"] == 0
    return "true" if ok else "false"
