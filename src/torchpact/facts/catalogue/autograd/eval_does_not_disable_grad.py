CLAIM = ("`model.eval()` does not disable gradient tracking: outputs still record a graph and save "
         "activations unless the loop runs under `torch.no_grad()` / `torch.inference_mode()`.")
EXPECTED = "true"


def run() -> str:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).eval()
    counts = {}
    for name, mode in (("eval()", torch.enable_grad), ("eval() + no_grad()", torch.no_grad),
                       ("eval() + inference_mode()", torch.inference_mode)):
        saved = []
        with mode(), torch.autograd.graph.saved_tensors_hooks(lambda t, saved=saved: saved.append(t) or t,
                                                              lambda t: t):
            out = model(torch.randn(8, 16))
        counts[name] = len(saved)
        grad_fn = type(out.grad_fn).__name__ if out.grad_fn is not None else None
        print(f"{name}: output grad_fn = {grad_fn}, saved activations = {len(saved)}")
    return "true" if counts["eval()"] > 0 and counts["eval() + no_grad()"] == 0 else "false"
