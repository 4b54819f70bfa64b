CLAIM = ("`torch.randn(3, requires_grad=True).double()` is a non-leaf copy: its `.grad` stays None and an "
         "optimizer refuses it; a conversion that changes nothing returns the leaf itself.")
EXPECTED = "true"


def run() -> str:
    import torch

    w = torch.randn(3, requires_grad=True).double()
    print(f"is_leaf: {w.is_leaf}, grad_fn: {type(w.grad_fn).__name__}")
    (w * 2).sum().backward()
    print(f".grad after backward: {w.grad}")
    try:
        torch.optim.SGD([w], lr=0.1)
        refused = False
    except ValueError as exc:
        refused = "non-leaf" in str(exc)
    print(f"torch.optim.SGD([w]) raises ValueError (can't optimize a non-leaf Tensor): {refused}")
    same = torch.randn(3, requires_grad=True)
    print("a float32 leaf's .float() / .to('cpu') is the leaf itself: "
          f"{same.float() is same and same.to('cpu') is same}")
    fixed = torch.randn(3, dtype=torch.float64, requires_grad=True)
    print(f"torch.randn(3, dtype=torch.float64, requires_grad=True).is_leaf: {fixed.is_leaf}")
    return "true" if not w.is_leaf and w.grad is None and refused else "false"
