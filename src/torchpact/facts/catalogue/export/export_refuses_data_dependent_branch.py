CLAIM = ("`torch.export.export` refuses a model whose `forward` branches on tensor values, instead of "
         "recording one branch like `torch.jit.trace`.")
EXPECTED = "true"


def run() -> str:
    import torch

    class Gate(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x - 1

    try:
        torch.export.export(Gate(), (torch.ones(3),))
        print("torch.export.export: exported")
        return "false"
    except Exception as exc:  # noqa: BLE001 - GuardOnDataDependentSymNode / UserError by version
        print(f"torch.export.export: {type(exc).__name__}: "
              f"{'Could not guard on data-dependent expression' in str(exc)}")
        return "true"
