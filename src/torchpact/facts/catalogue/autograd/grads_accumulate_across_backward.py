CLAIM = ("`backward()` adds into `.grad` instead of overwriting it, so a loop without `zero_grad()` "
         "steps with the sum of all past gradients.")
EXPECTED = "true"


def run() -> str:
    import torch

    w = torch.tensor([1.0], requires_grad=True)
    grads = []
    for _ in range(3):
        (3 * w).sum().backward()
        grads.append(w.grad.item())
    print(f"w.grad after each of 3 backward() calls of d(3w)/dw = 3: {grads}")
    opt = torch.optim.SGD([w], lr=0.1)
    opt.zero_grad()
    print(f"after optimizer.zero_grad(): w.grad = {w.grad}")
    return "true" if grads == [3.0, 6.0, 9.0] else "false"
