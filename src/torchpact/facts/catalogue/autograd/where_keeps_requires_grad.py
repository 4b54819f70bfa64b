CLAIM = "`torch.where` with a bool condition keeps `requires_grad` (the condition does not cut the graph)."
EXPECTED = "true"


def run() -> str:
    import torch

    p = torch.tensor([-1.0, 2.0, 3.0], requires_grad=True)
    out = torch.where(p > 0, p, torch.zeros(3))
    print(f"torch.where(p > 0, p, zeros).requires_grad: {out.requires_grad}")
    scalar = torch.where(torch.tensor([True, False, True]), p, 0.0)
    print(f"torch.where(mask, p, 0.0).requires_grad: {scalar.requires_grad}")
    out.sum().backward()
    print(f"p.grad: {p.grad.tolist()}")
    return "true" if out.requires_grad and scalar.requires_grad and p.grad.tolist() == [0.0, 1.0, 1.0] else "false"
