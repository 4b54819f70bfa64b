CLAIM = ("Small gradients flush to zero in float16 without loss scaling; the smallest positive float16 is "
         "about 6e-8.")
EXPECTED = "true"


def run() -> str:
    import torch

    tiny = torch.finfo(torch.float16).smallest_normal * 2**-10  # smallest subnormal: 2**-24
    print(f"smallest positive float16: 2**-24 = {tiny:.3e}")
    print(f"torch.tensor(2e-8).half() == {torch.tensor(2e-8).half().item()}")
    w = torch.ones(4, dtype=torch.float16, requires_grad=True)
    (w * 1e-4).sum().mul(1e-4).backward()  # each gradient is 1e-8
    print(f"float16 gradients of size 1e-8: {w.grad.tolist()}")
    w.grad = None
    (w * 1e-4).sum().mul(1e-4).mul(1024.0).backward()  # loss scaling, as GradScaler does
    print(f"the same loss scaled by 1024, gradients unscaled in float32: "
          f"{[f'{g:.2e}' for g in (w.grad.float() / 1024).tolist()]}")
    return "true" if (torch.tensor(2e-8).half() == 0).item() and not w.grad.eq(0).any() else "false"
