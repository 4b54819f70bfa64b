CLAIM = ("`torch.onnx.export` without `dynamic_shapes` (or `dynamic_axes`) gives the ONNX inputs the "
         "example's fixed shape, batch size included.")
EXPECTED = "true"
TIMEOUT_S = 90


def run() -> str:
    import torch

    model = torch.nn.Linear(4, 2).eval()

    def declared(program):
        inp = program.model_proto.graph.input[0]
        return [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim]

    fixed = torch.onnx.export(model, (torch.randn(3, 4),), verbose=False)
    dynamic = torch.onnx.export(model, (torch.randn(3, 4),), verbose=False,
                                dynamic_shapes=({0: torch.export.Dim("batch")},))
    print(f"input shape in the ONNX graph, default: {declared(fixed)}")
    print(f"with dynamic_shapes=({{0: Dim('batch')}},): {declared(dynamic)}")
    return "true" if declared(fixed) == [3, 4] else "false"
