CLAIM = ("`torch.compile` with a new backend callable on every call (a lambda in a loop) recompiles every "
         "time, until `recompile_limit` (8) is hit; from then on the code runs eagerly.")
EXPECTED = "true"


def run() -> str:
    import torch
    from torch._dynamo.utils import counters

    model, x = torch.nn.Linear(4, 2), torch.randn(3, 4)
    limit = torch._dynamo.config.recompile_limit
    print(f"torch._dynamo.config.recompile_limit: {limit}")
    torch._dynamo.reset()
    counters.clear()
    for _ in range(limit + 3):
        out = torch.compile(model, backend=lambda gm, inputs: gm.forward)(x)
    new_each_time = counters["stats"]["unique_graphs"]
    print(f"{limit + 3} calls with a new lambda backend each: {new_each_time} graphs compiled; "
          f"result still right: {torch.allclose(out, model(x))}")

    def backend(gm, inputs):
        return gm.forward

    torch._dynamo.reset()
    counters.clear()
    for _ in range(limit + 3):
        torch.compile(model, backend=backend)(x)
    print(f"{limit + 3} calls with the same backend function: {counters['stats']['unique_graphs']} graph compiled")
    return "true" if new_each_time == limit and counters["stats"]["unique_graphs"] == 1 else "false"
