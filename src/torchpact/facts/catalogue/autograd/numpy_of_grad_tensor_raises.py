CLAIM = "`.numpy()` raises on a tensor that requires grad."
EXPECTED = "partly"


def run() -> str:
    import torch

    w = torch.randn(3, requires_grad=True)

    def attempt(label, fn):
        try:
            fn()
            print(f"{label}: ran")
            return False
        except RuntimeError as exc:
            print(f"{label}: RuntimeError: {exc}")
            return True

    raises = attempt("w.numpy()", w.numpy)
    with torch.no_grad():
        under_no_grad = attempt("w.numpy() under no_grad", w.numpy)
    with torch.inference_mode():
        under_inference = attempt("w.numpy() under inference_mode", w.numpy)
    attempt("w.detach().numpy()", lambda: w.detach().numpy())
    if raises and not under_no_grad and not under_inference:
        print("only while grad mode is on")
        return "partly"
    return "true" if raises else "false"
