CLAIM = ("Writing through `.data` between a forward pass and its `backward()` makes backward use the new "
         "value, silently (not the value the forward used, and no error).")
EXPECTED = "true"


def _setup():
    import torch

    w = torch.tensor([1.0, 2.0], requires_grad=True)
    x = torch.tensor([3.0, 4.0], requires_grad=True)
    return w, x, (w * x).sum()  # mul saves w to compute x.grad


def run() -> str:
    import torch

    w, x, y = _setup()
    w.data.mul_(2)
    y.backward()
    print(f"loss computed with w = [1, 2]: {y.item()}")
    print(f"x.grad after w.data.mul_(2): {x.grad.tolist()} (the old w would give [1.0, 2.0])")
    silently_new = x.grad.tolist() == [2.0, 4.0]

    w, x, y = _setup()
    with torch.no_grad():
        w.mul_(2)  # the same write, visible to autograd's version counter
    try:
        y.backward()
        print("the same write without .data: backward ran")
    except RuntimeError:
        print("the same write without .data: backward raises (modified by an inplace operation)")
    return "true" if silently_new else "false"
