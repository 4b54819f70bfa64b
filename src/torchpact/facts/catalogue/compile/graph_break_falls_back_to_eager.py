CLAIM = ("A graph break (here a `print` in `forward`) does not make `torch.compile` fail: the code is split "
         "into several graphs and still gives the eager result; `fullgraph=True` turns it into an error.")
EXPECTED = "true"


def run() -> str:
    import contextlib
    import io

    import torch
    from torch._dynamo.utils import counters

    class Chatty(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)

        def forward(self, x):
            h = self.a(x)
            print("between the layers")  # not traceable: a graph break
            return self.b(h.relu())

    model, x = Chatty(), torch.randn(3, 4)
    counters.clear()
    with contextlib.redirect_stdout(io.StringIO()):
        out = torch.compile(model, backend="eager")(x)
        expected = model(x)
    graphs = counters["stats"]["unique_graphs"]
    print(f"graphs compiled: {graphs}; graph breaks: {sum(counters['graph_break'].values())}; "
          f"result equals eager: {torch.allclose(out, expected)}")
    torch._dynamo.reset()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            torch.compile(model, backend="eager", fullgraph=True)(x)
        print("fullgraph=True: ran")
        strict = False
    except Exception as exc:  # noqa: BLE001 - torch._dynamo.exc.Unsupported
        print(f"fullgraph=True: {type(exc).__name__}")
        strict = True
    return "true" if graphs >= 2 and torch.allclose(out, expected) and strict else "false"
