CLAIM = ("`torch.jit.trace` records only the branch the example input took: other inputs silently get "
         "that branch's result (only a `TracerWarning` at trace time).")
EXPECTED = "true"


def run() -> str:
    import warnings

    import torch

    class Gate(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x - 1

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = torch.jit.trace(Gate(), torch.ones(3))
    warned = any(w.category is torch.jit.TracerWarning for w in caught)
    print(f"TracerWarning at trace time: {warned}")
    neg = torch.full((3,), -2.0)
    print(f"eager on -2: {Gate()(neg).tolist()}, traced on -2: {traced(neg).tolist()}")
    return "true" if not torch.equal(Gate()(neg), traced(neg)) else "false"
