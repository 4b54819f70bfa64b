CLAIM = "Calling `backward()` twice through the same graph raises unless the first call passed `retain_graph=True`."
EXPECTED = "true"


def run() -> str:
    import torch

    x = torch.ones(2, requires_grad=True)
    y = (x.exp() * 2).sum()  # exp saves its output, freed by the first backward
    y.backward()
    try:
        y.backward()
        raised = False
        print("second backward(): ran")
    except RuntimeError as exc:
        raised = "a second time" in str(exc)
        print(f"second backward(): RuntimeError: {str(exc).split('(')[0].strip()}")
    z = (x.exp() * 2).sum()
    z.backward(retain_graph=True)
    z.backward()
    print("with retain_graph=True on the first call: the second ran")
    return "true" if raised else "false"
