CLAIM = "`.cpu()` on a tensor that is already on the CPU returns the same object, not a copy."
EXPECTED = "true"


def run() -> str:
    import torch

    t = torch.arange(4.0)
    same = {
        "t.cpu()": t.cpu() is t,
        "t.to('cpu')": t.to("cpu") is t,
        "t.float()": t.float() is t,
        "t.contiguous()": t.contiguous() is t,
        "t.to('cpu', copy=True)": t.to("cpu", copy=True) is t,
        "t.clone()": t.clone() is t,
    }
    for expr, is_t in same.items():
        print(f"{expr} is t: {is_t}")
    c = t.cpu()
    c[0] = 100.0
    print(f"writing through t.cpu() changes t: {t[0].item() == 100.0}")
    return "true" if same["t.cpu()"] and t[0].item() == 100.0 else "false"
