CLAIM = "`torch.jit.script` cannot compile a `for` loop over `range(n)` with an `int` argument `n`."
EXPECTED = "false"


def run() -> str:
    import torch

    class Repeat(torch.nn.Module):
        def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
            for i in range(n):
                x = x * 2 + i
            return x

    try:
        scripted = torch.jit.script(Repeat())
    except Exception as exc:  # noqa: BLE001 - any failure to compile is the claim holding
        print(f"torch.jit.script: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        return "true"
    x = torch.ones(2)
    results = {n: (scripted(x, n).tolist(), Repeat()(x, n).tolist()) for n in (0, 1, 3)}
    for n, (got, eager) in results.items():
        print(f"n = {n}: scripted {got}, eager {eager}")
    print(f"the loop is kept in the TorchScript graph: {'prim::Loop' in str(scripted.graph)}")
    return "false" if all(got == eager for got, eager in results.values()) else "true"
