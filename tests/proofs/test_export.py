"""Proofs for export rules: the pitfall, run with real torch (and onnxruntime), has the consequence the docs name."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn


def _onnx():
    pytest.importorskip("onnxscript")
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    return onnx, ort


def _session(ort, path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _trace(model, example):
    """torch.jit.trace, returning the traced module and the TracerWarnings it emitted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = torch.jit.trace(model, example)
    return traced, [str(w.message) for w in caught if w.category is torch.jit.TracerWarning]


class Gate(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


class Crop(nn.Module):
    def forward(self, x, lengths):
        n = int(lengths.max())
        return x[:, :n]


class Scale(nn.Module):
    def forward(self, x):
        return x * x.sum().item()


@pytest.mark.proves("TP701")
def test_trace_bakes_in_the_branch_and_the_number_of_the_example():
    traced, warned = _trace(Gate(), torch.ones(3))
    assert any("Converting a tensor to a Python boolean might cause the trace to be incorrect" in w for w in warned)
    neg = torch.full((3,), -2.0)
    assert torch.equal(Gate()(neg), torch.full((3,), -3.0))
    assert torch.equal(traced(neg), torch.full((3,), -4.0))  # the `x * 2` branch of the example, silently

    x = torch.arange(8.0).reshape(1, 8)
    traced, warned = _trace(Crop(), (x, torch.tensor([2, 3])))
    assert any("Converting a tensor to a Python" in w for w in warned)
    assert Crop()(x, torch.tensor([5, 1])).shape == (1, 5)
    assert traced(x, torch.tensor([5, 1])).shape == (1, 3)  # the example's max length, frozen


@pytest.mark.proves("TP701")
def test_torch_export_refuses_a_branch_on_tensor_values_but_keeps_item_symbolic(tmp_path):
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    with pytest.raises(GuardOnDataDependentSymNode, match="Could not guard on data-dependent expression"):
        torch.export.export(Gate(), (torch.ones(3),))
    # a number from .item() used in arithmetic is fine for torch.export: not flagged for it
    ep = torch.export.export(Scale(), (torch.ones(3),))
    assert torch.equal(ep.module()(torch.full((3,), 2.0)), Scale()(torch.full((3,), 2.0)))

    # the default ONNX exporter runs torch.export and fails the same way
    _onnx()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception, match="Could not guard on data-dependent expression") as info:
            torch.onnx.export(Gate(), (torch.ones(3),), tmp_path / "gate.onnx", verbose=False)
    assert type(info.value).__name__ == "TorchExportError"


class DropBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.bn(self.fc(x)))


@pytest.mark.proves("TP702")
def test_trace_in_training_mode_bakes_dropout_and_batch_stats_and_moves_running_stats():
    torch.manual_seed(0)
    model = DropBN()  # a new module is in training mode
    assert model.training
    x = torch.randn(8, 4)
    traced, _ = _trace(model, x)
    assert model.bn.num_batches_tracked.item() > 0  # tracing ran forward in training mode
    traced.eval()
    model.eval()
    out1, out2 = traced(x), traced(x)
    assert not torch.equal(out1, out2)  # dropout still active after .eval()
    assert (out1 == 0).any()
    assert not torch.allclose(out1, model(x))

    torch.manual_seed(0)
    bn_only = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    traced, _ = _trace(bn_only, x)
    traced.eval()
    bn_only.eval()
    single = x[:2] + 10  # batch statistics of 2 shifted rows vs. the running statistics
    assert not torch.allclose(traced(single), bn_only(single), atol=1e-3)


@pytest.mark.proves("TP702")
def test_torch_export_in_training_mode_records_training_ops_and_cannot_be_eval_ed():
    torch.manual_seed(0)
    ep = torch.export.export(DropBN(), (torch.randn(8, 4),))
    code = ep.graph_module.code
    assert "torch.ops.aten.dropout.default(" in code and ", 0.5, True)" in code
    assert "torch.ops.aten.batch_norm.default(" in code
    bn = next(n for n in ep.graph.nodes if n.target is torch.ops.aten.batch_norm.default)
    assert bn.args[5] is True  # training=True
    with pytest.raises(NotImplementedError, match="Calling eval\\(\\) is not supported yet."):
        ep.module().eval()


class SpareLayers(nn.Module):
    """Dropout and BatchNorm built but never called by forward."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.spare_drop = nn.Dropout(0.5)
        self.spare_bn = nn.BatchNorm1d(4)

    def forward(self, x):
        return self.fc(x)


@pytest.mark.proves("TP702", "TP605")
def test_layers_built_but_never_called_change_nothing_in_training_mode():
    torch.manual_seed(0)
    model = SpareLayers()
    x = torch.randn(8, 4)
    traced, _ = _trace(model, x)
    assert torch.equal(traced(x), traced(x)) and torch.equal(traced(x), model.eval()(x))  # no dropout
    assert model.spare_bn.num_batches_tracked.item() == 0  # no batch statistics, no running-stat update
    ep = torch.export.export(SpareLayers(), (x,))
    assert "dropout" not in ep.graph_module.code and "batch_norm" not in ep.graph_module.code


class BNThenDrop(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        h = self.bn(self.fc(x))
        return h, self.drop(h)


@pytest.mark.proves("TP702")
def test_default_onnx_export_in_training_mode_keeps_dropout_active(tmp_path):
    onnx, ort = _onnx()
    import numpy as np

    torch.manual_seed(0)
    model = BNThenDrop()
    with torch.no_grad():
        model.bn.running_mean.fill_(3.0)
    x = torch.randn(8, 4)
    path = tmp_path / "drop.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), path, verbose=False)  # training=TrainingMode.EVAL is the default...
    graph = onnx.load(path).graph
    drop = next(n for n in graph.node if n.op_type == "Dropout")
    consts = {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}
    assert bool(consts[drop.input[2]]) is True  # ...but the graph's Dropout has training_mode=True
    sess = _session(ort, path)
    bn_out, drop_out = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
    eval_bn, eval_drop = (t.detach().numpy() for t in model.eval()(x))
    assert (drop_out == 0).sum() > 0 and not np.allclose(drop_out, eval_drop, atol=1e-5)
    # BatchNorm is exported with its running statistics, so TP702 does not flag it for ONNX
    assert np.allclose(bn_out, eval_bn, atol=1e-5)


@pytest.mark.proves("TP703")
def test_a_callable_that_adds_the_batch_dimension_itself_exports_one_sample_inputs(tmp_path):
    # What the rule leaves alone: the exported function / forward makes the leading 1 from each input,
    # so the ONNX inputs are one sample and no batch size is fixed.
    onnx, ort = _onnx()
    import numpy as np

    policy = nn.Linear(6, 3).eval()
    for p in policy.parameters():
        p.requires_grad_(False)

    def act(*obs):
        obs = [o.view(1, *o.shape) for o in obs]
        return policy(obs[0])

    class Framewise(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(40, 10)

        def forward(self, frame):
            return self.proj(frame.unsqueeze(0)).squeeze(0)

    traced_path, module_path = tmp_path / "act.onnx", tmp_path / "frame.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(act, (torch.rand(6),), check_trace=False)
        torch.onnx.export(traced, (torch.rand(6),), traced_path, dynamo=False)
        torch.onnx.export(Framewise().eval(), (torch.rand(40),), module_path, verbose=False)
        with pytest.raises(Exception, match="instance of `torch.nn.Module`"):
            torch.onnx.export(traced, (torch.rand(6),), tmp_path / "never.onnx", verbose=False)  # TP704's case
    for path, size in ((traced_path, 6), (module_path, 40)):
        inp = onnx.load(path).graph.input[0]
        assert [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim] == [size]
        sess = _session(ort, path)
        assert sess.run(None, {sess.get_inputs()[0].name: np.random.rand(size).astype("float32")})[0].size in (3, 10)


@pytest.mark.proves("TP703")
def test_onnx_export_without_dynamic_shapes_fixes_the_batch_size(tmp_path):
    onnx, ort = _onnx()
    import numpy as np

    model = nn.Linear(4, 2).eval()
    fixed, dynamic = tmp_path / "fixed.onnx", tmp_path / "dynamic.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(3, 4),), fixed, verbose=False)
        torch.onnx.export(model, (torch.randn(3, 4),), dynamic, verbose=False,
                          dynamic_shapes=({0: torch.export.Dim("batch")},))

    def declared(path):
        inp = onnx.load(path).graph.input[0]
        return [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim]

    assert declared(fixed) == [3, 4]
    assert declared(dynamic) == ["batch", 4]
    batch5 = np.random.randn(5, 4).astype("float32")
    sess = _session(ort, fixed)
    with pytest.raises(Exception, match="Got invalid dimensions for input") as info:
        sess.run(None, {sess.get_inputs()[0].name: batch5})
    assert "Got: 5 Expected: 3" in str(info.value)
    sess = _session(ort, dynamic)
    assert sess.run(None, {sess.get_inputs()[0].name: batch5})[0].shape == (5, 2)


@pytest.mark.proves("TP704")
def test_default_onnx_exporter_rejects_a_script_module(tmp_path):
    _onnx()
    model = nn.Linear(4, 2).eval()
    scripted = torch.jit.script(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception, match="Exporting a ScriptModule is not supported") as info:
            torch.onnx.export(scripted, (torch.randn(1, 4),), tmp_path / "s.onnx", verbose=False)
        assert type(info.value).__name__ == "TorchExportError"
        with pytest.raises(ValueError, match="Exporting a ScriptModule is not supported"):
            torch.export.export(scripted, (torch.randn(1, 4),))
        # the TorchScript-based exporter still takes it
        torch.onnx.export(scripted, (torch.randn(1, 4),), tmp_path / "legacy.onnx", dynamo=False)
    assert (tmp_path / "legacy.onnx").exists()
