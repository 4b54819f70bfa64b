CLAIM = "`torch.compile(model)` compiles nothing until the first call; that call pays for the compilation."
EXPECTED = "true"


def run() -> str:
    import torch
    from torch._dynamo.utils import counters

    model = torch.nn.Linear(4, 2)
    counters.clear()
    compiled = torch.compile(model, backend="eager")
    before = counters["stats"]["unique_graphs"]
    print(f"torch.compile(model) returns {type(compiled).__name__}; graphs compiled: {before}")
    compiled(torch.randn(3, 4))
    first = counters["stats"]["unique_graphs"]
    compiled(torch.randn(3, 4))
    print(f"after the first call: {first}; "
          f"after a second call with the same shape: {counters['stats']['unique_graphs']}")
    print(f"the compiled module shares the parameters: {compiled.weight is model.weight}")
    return "true" if before == 0 and first == 1 == counters["stats"]["unique_graphs"] else "false"
