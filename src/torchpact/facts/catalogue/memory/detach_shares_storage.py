CLAIM = "`.detach()` returns a tensor that shares storage and the version counter with the original."
EXPECTED = "true"


def run() -> str:
    import torch

    w = torch.ones(3, requires_grad=True)
    d = w.detach()
    shares = d.untyped_storage().data_ptr() == w.untyped_storage().data_ptr()
    print(f"same storage: {shares}")
    d.add_(1)
    print(f"after d.add_(1): w = {w.tolist()}, w._version = {w._version}, d._version = {d._version}")
    counter = w._version == d._version == 1
    # what the shared version counter is for: backward notices the change
    y = torch.ones(3, requires_grad=True)
    out = (y * y).sum()
    y.detach().mul_(2)
    try:
        out.backward()
        print("backward after an in-place change through .detach(): ran")
    except RuntimeError as exc:
        print("backward after an in-place change through .detach(): RuntimeError:",
              str(exc).split(";")[0].split(": ", 1)[0])
    return "true" if shares and counter and w.tolist() == [2.0, 2.0, 2.0] else "false"
