CLAIM = ("`torch.export.export` of a module in training mode records training-mode Dropout and BatchNorm, "
         "and the exported module cannot be switched with `.eval()`.")
EXPECTED = "true"


def run() -> str:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5))  # new: training mode
    ep = torch.export.export(model, (torch.randn(8, 4),))
    code = ep.graph_module.code
    dropout = "torch.ops.aten.dropout.default(" in code and ", 0.5, True)" in code
    bn = next((n for n in ep.graph.nodes if n.target is torch.ops.aten.batch_norm.default), None)
    print(f"graph has dropout with train=True: {dropout}")
    print(f"graph has batch_norm with training=True: {bn is not None and bn.args[5] is True}")
    try:
        ep.module().eval()
        print("ep.module().eval(): ran")
        refuses = False
    except NotImplementedError as exc:
        print(f"ep.module().eval(): NotImplementedError: {exc}")
        refuses = True
    return "true" if dropout and refuses else "false"
