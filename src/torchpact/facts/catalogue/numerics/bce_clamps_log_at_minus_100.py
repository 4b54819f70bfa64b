CLAIM = ("`BCELoss` clamps its log at -100: on a saturated sigmoid the loss stops at 100 and the gradient "
         "is exactly 0, while `BCEWithLogitsLoss` keeps both.")
EXPECTED = "true"


def run() -> str:
    import torch
    import torch.nn.functional as F

    z = torch.tensor([20.0], requires_grad=True)
    target = torch.tensor([0.0])
    print(f"torch.sigmoid(20.0) == 1.0 in float32: {torch.sigmoid(torch.tensor(20.0)).item() == 1.0}")
    loss = F.binary_cross_entropy(torch.sigmoid(z), target)
    loss.backward()
    print(f"binary_cross_entropy(sigmoid(20), 0) = {loss.item()}, gradient = {z.grad.item()}")
    z.grad = None
    fused = F.binary_cross_entropy_with_logits(z, target)
    fused.backward()
    print(f"binary_cross_entropy_with_logits(20, 0) = {fused.item():.4f}, gradient = {z.grad.item():.4f}")
    return "true" if loss.item() == 100.0 and fused.item() == 20.0 and z.grad.item() > 0.99 else "false"
