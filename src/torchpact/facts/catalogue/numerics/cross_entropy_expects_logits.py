CLAIM = ("`CrossEntropyLoss` applies log-softmax itself: given softmax outputs, a perfect prediction "
         "still has a loss far above 0 and a confidently wrong one gets almost no gradient.")
EXPECTED = "true"


def run() -> str:
    import math

    import torch
    import torch.nn.functional as F

    target = torch.tensor([0])
    perfect = F.cross_entropy(torch.tensor([[1.0, 0.0, 0.0]]), target).item()
    print(f"cross_entropy of the one-hot probabilities [1, 0, 0]: {perfect:.4f} "
          f"(= log(1 + 2/e) = {math.log(1 + 2 / math.e):.4f})")
    logits = torch.tensor([[0.0, 10.0, 0.0]], requires_grad=True)
    F.cross_entropy(torch.softmax(logits, 1), target).backward()
    through_softmax = logits.grad.abs().max().item()
    logits.grad = None
    F.cross_entropy(logits, target).backward()
    on_logits = logits.grad.abs().max().item()
    print(f"largest gradient, confidently wrong: through softmax < 1e-4: {through_softmax < 1e-4}; "
          f"on logits > 0.99: {on_logits > 0.99}")
    return "true" if perfect > 0.5 and through_softmax < 1e-4 < on_logits else "false"
