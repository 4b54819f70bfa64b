CLAIM = ("A newly built `nn.Module` is in training mode: Dropout drops and BatchNorm uses batch statistics "
         "until `.eval()`.")
EXPECTED = "true"


def run() -> str:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5))
    print(f"model.training: {model.training}")
    x = torch.randn(8, 4)
    with torch.no_grad():
        a, b = model(x), model(x)
    print(f"two forward passes differ (dropout active): {not torch.equal(a, b)}")
    print(f"BatchNorm running_mean moved by the forward passes: {bool(model[1].running_mean.abs().sum() > 0)}")
    model.eval()
    with torch.no_grad():
        print(f"after .eval(): two passes equal: {torch.equal(model(x), model(x))}")
    return "true" if not torch.equal(a, b) else "false"
