CLAIM = ("`optimizer.zero_grad()` sets gradients to None (not zero) by default, and `optimizer.step()` "
         "skips parameters whose `.grad` is None, weight decay included.")
EXPECTED = "true"


def run() -> str:
    import torch

    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.AdamW([p], lr=0.1, weight_decay=0.5)
    p.sum().backward()
    opt.zero_grad()
    cleared = p.grad
    print(f"after zero_grad(): p.grad = {cleared}")
    opt.step()
    skipped = p.detach().tolist() == [1.0, 1.0]
    print(f"after step() with p.grad None: p = {p.detach().tolist()} (weight decay applied: {not skipped})")
    p.grad = torch.zeros(2)
    opt.step()
    print(f"after step() with p.grad zeros: p = {[round(v, 4) for v in p.detach().tolist()]}")
    return "true" if cleared is None and skipped else "false"
