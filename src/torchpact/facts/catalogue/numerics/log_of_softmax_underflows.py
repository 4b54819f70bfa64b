CLAIM = "`torch.log(torch.softmax(x))` gives -inf (and NaN gradients) where `torch.log_softmax(x)` is finite."
EXPECTED = "true"


def run() -> str:
    import torch

    x = torch.tensor([0.0, 200.0], requires_grad=True)
    two_step = torch.log(torch.softmax(x, 0))
    two_step.sum().backward()
    print(f"log(softmax([0, 200])) = {two_step.tolist()}, gradient = {x.grad.tolist()}")
    x.grad = None
    fused = torch.log_softmax(x, 0)
    fused.sum().backward()
    print(f"log_softmax([0, 200]) = {fused.tolist()}, gradient = {x.grad.tolist()}")
    return "true" if torch.isinf(two_step).any() and torch.isfinite(fused).all() else "false"
