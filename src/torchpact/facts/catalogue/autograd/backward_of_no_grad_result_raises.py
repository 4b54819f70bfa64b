CLAIM = "`backward()` on a value computed under `torch.no_grad()` raises instead of computing no gradient."
EXPECTED = "true"


def run() -> str:
    import torch
    import torch.nn.functional as F

    model = torch.nn.Linear(3, 1)
    x, y = torch.randn(4, 3), torch.randn(4, 1)
    with torch.no_grad():
        loss = F.mse_loss(model(x), y)
    print(f"loss.requires_grad: {loss.requires_grad}, grad_fn: {loss.grad_fn}")
    try:
        loss.backward()
        raised = False
        print("loss.backward(): ran")
    except RuntimeError as exc:
        raised = True
        print(f"loss.backward(): RuntimeError: {exc}")
    loss = F.mse_loss(model(x), y)
    with torch.no_grad():
        loss.backward()  # the graph was built outside: this works
    print("backward() called inside no_grad on a graph built outside: "
          f"weight.grad set: {model.weight.grad is not None}")
    return "true" if raised else "false"
