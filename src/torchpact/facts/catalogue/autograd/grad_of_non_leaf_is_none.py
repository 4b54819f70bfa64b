CLAIM = "`.grad` of a non-leaf tensor is None after `backward()` (with a warning) unless `retain_grad()` was called."
EXPECTED = "true"


def run() -> str:
    import warnings

    import torch

    x = torch.randn(3, requires_grad=True)
    y = x * 2
    z = x * 3
    z.retain_grad()
    (y.sum() + z.sum()).backward()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = y.grad
    warned = any("not a leaf Tensor is being accessed" in str(w.message) for w in caught)
    print(f"y = x * 2: y.grad = {g}, warning: {warned}")
    print(f"z = x * 3 with z.retain_grad(): z.grad = {z.grad.tolist()}")
    print(f"the leaf x: x.grad = {x.grad.tolist()}")
    return "true" if g is None and warned and z.grad is not None else "false"
