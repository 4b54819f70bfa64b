CLAIM = ("`total += loss` across training iterations keeps every iteration's autograd graph alive, even "
         "after each `loss.backward()`.")
EXPECTED = "true"


def _graph_nodes(t) -> int:
    seen, stack = set(), [t.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is not None and fn not in seen:
            seen.add(fn)
            stack.extend(n for n, _ in fn.next_functions)
    return len(seen)


def run() -> str:
    import itertools

    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    total, sizes = 0, []
    for _ in range(5):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        total += loss
        sizes.append(_graph_nodes(total))
    print(f"autograd nodes reachable from total after each iteration: {sizes}")
    detached = 0
    for _ in range(5):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        detached += loss.detach()
    print(f"with loss.detach(): grad_fn = {detached.grad_fn}")
    grows = all(a < b for a, b in itertools.pairwise(sizes))
    return "true" if grows and detached.grad_fn is None else "false"
