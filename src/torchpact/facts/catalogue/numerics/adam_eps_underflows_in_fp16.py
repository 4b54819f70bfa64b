CLAIM = ("Adam's default `eps=1e-8` rounds to 0 in float16, so Adam on float16 parameters produces inf or "
         "NaN (division by zero).")
EXPECTED = "true"


def run() -> str:
    import torch
    from torch import nn

    print(f"torch.tensor(1e-8, dtype=torch.float16) == {torch.tensor(1e-8, dtype=torch.float16).item()}")

    def one_step(**kwargs):
        p = nn.Parameter(torch.ones(3, dtype=torch.float16))
        opt = torch.optim.Adam([p], lr=1e-3, **kwargs)
        p.grad = torch.tensor([1e-4, 1e-6, 0.0], dtype=torch.float16)
        opt.step()
        return p.detach()

    broken, fixed = one_step(), one_step(eps=1e-4)
    print(f"one Adam step on float16 with grads [1e-4, 1e-6, 0]: {broken.tolist()}")
    print(f"the same with eps=1e-4: {fixed.tolist()}")
    return "true" if not torch.isfinite(broken).all() and torch.isfinite(fixed).all() else "false"
