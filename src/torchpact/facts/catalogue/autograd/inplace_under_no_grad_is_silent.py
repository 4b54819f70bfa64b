CLAIM = ("Changing a tensor of the autograd graph in place under `torch.no_grad()` silently gives wrong "
         "gradients.")
EXPECTED = "partly"


def run() -> str:
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 5)
    x, y = torch.randn(3, 4), torch.tensor([0, 1, 2])

    def weight_grad(loss_fn):
        lin.zero_grad()
        loss_fn().backward()
        return lin.weight.grad.clone()

    def clamp_in_place():
        logits = lin(x) * 3
        with torch.no_grad():
            logits.clamp_(-0.5, 0.5)
        return F.cross_entropy(logits, y)

    wrong = weight_grad(clamp_in_place)
    right = weight_grad(lambda: F.cross_entropy((lin(x) * 3).clamp(-0.5, 0.5), y))
    differs = bool((wrong - right).abs().max() > 0.01)
    print(f"clamp_ under no_grad after a multiplication: gradient differs from the out-of-place clamp, "
          f"no error: {differs}")

    def sigmoid_then_clamp_in_place():
        h = torch.sigmoid(lin(x))  # sigmoid saves its output for backward
        with torch.no_grad():
            h.clamp_(0.2, 0.8)
        return h.pow(2).mean()

    try:
        weight_grad(sigmoid_then_clamp_in_place)
        raised = False
        print("clamp_ under no_grad of a sigmoid output: backward ran")
    except RuntimeError:
        raised = True
        print("clamp_ under no_grad of a sigmoid output: backward raises (modified by an inplace operation)")
    if differs and raised:
        print("silent when the op that produced the tensor did not save it; an error when it did")
        return "partly"
    return "true" if differs else "false"
