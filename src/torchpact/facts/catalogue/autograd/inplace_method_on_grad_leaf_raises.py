CLAIM = ("`a.add_(b)` on a leaf that requires grad raises, just like `a += b`; under `torch.no_grad()` "
         "both work.")
EXPECTED = "true"


def run() -> str:
    import torch

    outcomes = {}
    for expr in ("a += b", "a.add_(b)", "a.zero_()", "a[0] = 1.0", "a.data.add_(b)"):
        a, b = torch.ones(3, requires_grad=True), torch.ones(3)
        try:
            exec(expr)
            outcomes[expr] = "ran"
        except RuntimeError as exc:
            outcomes[expr] = "RuntimeError: " + str(exc).split(".")[0]
        print(f"{expr}: {outcomes[expr]}")
    a, b = torch.ones(3, requires_grad=True), torch.ones(3)
    with torch.no_grad():
        a.add_(b)
        a += b
    print(f"under no_grad: a = {a.tolist()}, still a leaf: {a.is_leaf}")
    raises = outcomes["a.add_(b)"].startswith("RuntimeError") and outcomes["a.add_(b)"] == outcomes["a += b"]
    return "true" if raises and a.tolist() == [3.0, 3.0, 3.0] else "false"
