CLAIM = "`.reshape()` always returns a view that shares memory with its input."
EXPECTED = "false"


def run() -> str:
    import torch

    x = torch.arange(6.0).reshape(2, 3)
    flat = x.reshape(6)
    print(f"contiguous x.reshape(6) shares memory: {flat.data_ptr() == x.data_ptr()}")
    xt = x.t()
    flat_t = xt.reshape(6)
    shares = flat_t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    print(f"x.t().reshape(6) shares memory: {shares}")
    try:
        xt.view(6)
        print("x.t().view(6): ran")
    except RuntimeError as exc:
        print(f"x.t().view(6): RuntimeError: {str(exc).split('.')[0]}")
    return "true" if shares else "false"
