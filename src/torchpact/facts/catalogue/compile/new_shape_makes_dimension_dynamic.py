CLAIM = ("With default settings, a second input shape makes `torch.compile` recompile once with a dynamic "
         "dimension; later shapes reuse that graph instead of recompiling each time.")
EXPECTED = "true"


def run() -> str:
    import torch
    from torch._dynamo.utils import counters

    model = torch.nn.Linear(4, 2)
    compiled = torch.compile(model, backend="eager")
    counters.clear()
    graphs = []
    for batch in (2, 3, 5, 7, 11):
        compiled(torch.randn(batch, 4))
        graphs.append(counters["stats"]["unique_graphs"])
    print(f"graphs compiled after batch sizes 2, 3, 5, 7, 11: {graphs}")
    print(f"torch._dynamo.config.automatic_dynamic_shapes: {torch._dynamo.config.automatic_dynamic_shapes}")
    torch._dynamo.reset()
    counters.clear()
    static = torch.compile(model, backend="eager", dynamic=False)
    for batch in (2, 3, 5, 7, 11):
        static(torch.randn(batch, 4))
    print(f"with dynamic=False: {counters['stats']['unique_graphs']} graphs for the same 5 sizes")
    return "true" if graphs == [1, 2, 2, 2, 2] else "false"
