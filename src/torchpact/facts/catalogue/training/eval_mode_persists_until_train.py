CLAIM = ("`model.eval()` stays in effect until `model.train()` is called: backward, optimizer steps and new "
         "epochs do not switch the model back to training mode.")
EXPECTED = "true"


def run() -> str:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.eval()  # e.g. a validation pass at the end of epoch 0
    for _ in range(3):  # the next epochs' training steps
        optimizer.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        optimizer.step()
    x = torch.ones(2, 4)
    still_eval = not model.training and not model[1].training
    print(f"after 3 training steps: model.training = {model.training}, dropout.training = {model[1].training}")
    print(f"dropout inactive (two passes equal): {torch.equal(model(x), model(x))}")
    model.train()
    print(f"after model.train(): dropout.training = {model[1].training}")
    return "true" if still_eval else "false"
