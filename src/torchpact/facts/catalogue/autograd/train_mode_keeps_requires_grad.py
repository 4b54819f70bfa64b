CLAIM = "`model.train()` (or `.eval()`) inside `torch.no_grad()` changes no parameter's `requires_grad`."
EXPECTED = "true"


def run() -> str:
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2), torch.nn.Dropout())
    model[0].bias.requires_grad_(False)  # a frozen parameter must stay frozen too
    before = [p.requires_grad for p in model.parameters()]
    with torch.no_grad():
        model.eval()
        model.train()
    after = [p.requires_grad for p in model.parameters()]
    print(f"requires_grad before: {before}")
    print(f"requires_grad after eval()/train() under no_grad: {after}")
    print(f"grad mode after the block: {torch.is_grad_enabled()}")
    return "true" if before == after else "false"
