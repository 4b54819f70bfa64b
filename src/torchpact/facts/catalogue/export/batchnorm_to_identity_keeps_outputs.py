CLAIM = "Replacing BatchNorm layers with `nn.Identity()` before export keeps the model's outputs."
EXPECTED = "false"


def run() -> str:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    for _ in range(10):  # a little training moves the running statistics
        model(torch.randn(16, 4) * 3 + 1)
    model.eval()
    x = torch.randn(8, 4)
    with torch.no_grad():
        before = model(x)
        stripped = nn.Sequential(model[0], nn.Identity(), model[2], model[3])
        after = stripped(x)
        fresh = nn.BatchNorm1d(4).eval()
        fresh_identity = torch.equal(fresh(x), x)
    print(f"outputs equal after replacing a trained BatchNorm: {torch.allclose(before, after, atol=1e-4)}")
    print(f"even an untrained BatchNorm in eval mode is not the identity (it divides by sqrt(1 + eps)): "
          f"{not fresh_identity}")
    return "true" if torch.allclose(before, after, atol=1e-4) else "false"
