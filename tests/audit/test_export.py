"""export-check on hand-written modules, one per failure mode, and on a clean one.

Every finding is produced by really tracing / scripting / exporting / running onnxruntime; where a
message states what torch 2.13 does, a test here shows torch doing it.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from tests.audit import targets as T
from tests.audit.util import TARGETS, codes, export_report, marker_line, only
from torchpact.findings import Severity


def statuses(report):
    return {name: p.status for name, p in report.paths.items()}


def test_clean_model_gives_no_warning_and_every_path_matches():
    report = export_report("clean")
    assert codes(report, "warning") == []
    assert statuses(report) == {"trace": "ok", "script": "ok", "export": "ok", "onnx": "ok"}
    paths = report.summary()["paths"]
    for entry in paths.values():
        assert set(entry) >= {"status", "reason", "max_abs_err", "max_rel_err", "errors", "variants", "latency_ms"}
        assert entry["errors"] == []
        assert entry["max_abs_err"] is not None and entry["max_abs_err"] < 1e-4
        lat = entry["latency_ms"]
        assert set(lat) - {"unstable"} == {"artifact", "eager", "artifact_p99", "eager_p99"}
        assert 0 < lat["artifact"] <= lat["artifact_p99"] and 0 < lat["eager"] <= lat["eager_p99"]
        assert [v["name"] for v in entry["variants"]][:5] == ["example", "batch=1", "batch=2", "batch=9", "batch=17"]
    assert paths["export"]["strict"]["status"] == "ok" and paths["export"]["mode"] == "non-strict"


def test_jit_paths_are_reported_deprecated_as_torch_says():
    f = only(export_report("clean"), "TP755")
    assert f.severity is Severity.INFO
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.jit.trace(T.Clean().eval(), torch.rand(2, 8))
    said = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert "`torch.jit.trace` is deprecated. Please switch to `torch.compile` or `torch.export`." in said
    assert said[0] in f.message


def test_branch_on_tensor_value_is_found_on_its_line():
    report = export_report("gate")
    line = marker_line("GATE_LINE")
    trace = next(f for f in report.findings if f.code == "TP701" and f.severity is Severity.ERROR)
    assert (trace.path.endswith("targets.py"), trace.line) == (True, line)
    assert "branches on a tensor value" in trace.message and "values negated" in trace.message
    refusal = next(f for f in report.findings if f.code == "TP701" and f.severity is Severity.WARNING)
    assert refusal.line == line and "torch.export.export and torch.onnx.export raise" in refusal.message
    assert statuses(report) == {"trace": "mismatch", "script": "ok", "export": "failed", "onnx": "failed"}
    # what the finding says: the trace answers a negative input with the example's branch
    traced = torch.jit.trace(T.Gate(), torch.ones(3))
    neg = torch.full((3,), -3.0)
    assert torch.equal(T.Gate()(neg), neg - 1) and torch.equal(traced(neg), neg * 2)


def test_number_read_from_a_tensor_is_baked_into_the_trace():
    report = export_report("item_scale")
    f = next(f for f in report.findings if f.code == "TP701")
    assert f.line == marker_line("ITEM_LINE") and "turns a tensor into a Python number" in f.message
    # torch.export keeps .item() symbolic: that path is fine
    assert statuses(report)["export"] == "ok" and statuses(report)["onnx"] == "ok"


def test_batch_size_read_into_python_is_a_shape_specialisation():
    report = export_report("batch_count")
    line = marker_line("BATCH_LINE")
    trace = only(report, "TP751")
    assert trace.line == line and "turns a tensor into a Python integer" in trace.message
    assert "batch=1" in trace.message
    export = only(report, "TP752")
    assert export.line == line and export.subject == "x.shape[0]"
    assert "to the example's 4" in export.message and "rejects batch=1, batch=2, batch=9, batch=17" in export.message
    # the ONNX model built on it takes other batch sizes and silently returns wrong numbers: an error
    assert "the ONNX model accepts batch=1, batch=2, batch=9, batch=17 but returns wrong results" in export.message
    assert export.severity is Severity.ERROR
    assert "strict=True) kept it dynamic" in export.message
    assert report.paths["export"].detail["strict"]["status"] == "ok"


def test_torch_export_auto_dims_specialise_silently_and_the_program_then_rejects_other_sizes():
    from torch.export import Dim

    model, (x,) = T.batch_count()
    ep = torch.export.export(model, (x,), dynamic_shapes=({0: Dim.AUTO},))  # no error, no warning
    assert ep.graph_signature.user_inputs and str(ep.range_constraints) == "{}"
    with pytest.raises(AssertionError, match=r"Guard failed: x.size\(\)\[0\] == 4"):
        ep.module()(x[:1])
    strict = torch.export.export(model, (x,), dynamic_shapes=({0: Dim.AUTO},), strict=True)
    assert torch.allclose(strict.module()(x[:1]), model(x[:1]))


def test_loop_over_the_batch_is_found_on_its_line():
    report = export_report("row_loop")
    f = only(report, "TP751")
    assert f.line == marker_line("LOOP_LINE") and "iterates over a tensor" in f.message
    assert only(report, "TP752").line == marker_line("LOOP_LINE")


def test_model_in_training_mode_with_dropout():
    report = export_report("training_dropout")
    f = only(report, "TP702")
    assert "1 Dropout layer (net.2)" in f.message
    assert f.path.endswith("targets.py") and f.line == marker_line("def training_dropout", tag_prefix="")
    assert "two calls on the same input gave different outputs" in f.message
    assert codes(report, "warning") == ["TP702"]  # the paths were then compared in eval mode
    assert set(statuses(report).values()) == {"ok"}


def test_model_in_training_mode_with_batchnorm_keeps_its_running_stats():
    from torchpact.audit.export import export_check
    from torchpact.audit.target import load_target

    target = load_target(f"{TARGETS}:training_batchnorm")
    before = target.model.bn.running_mean.clone()
    report = export_check(target, paths=("trace",), budget_s=0.1)
    f = only(report, "TP702")
    assert "BatchNorm" in f.message and "batch's own statistics" in f.message
    assert torch.equal(target.model.bn.running_mean, before) and not target.model.training


def test_output_object_no_path_can_carry():
    report = export_report("custom_output")
    f = only(report, "TP753")
    assert f.severity is Severity.WARNING and "Result object at output[1]" in f.message
    assert "trace, export, onnx cannot carry" in f.message
    assert statuses(report) == {"trace": "failed", "script": "ok", "export": "failed", "onnx": "failed"}


def test_dict_output_needs_strict_false_for_trace():
    report = export_report("dict_output")
    f = only(report, "TP753")
    assert f.severity is Severity.INFO and "strict=False" in f.message
    assert report.paths["trace"].status == "ok" and report.paths["trace"].detail["traced_with"] == "strict=False"
    model, (x,) = T.dict_output()
    with pytest.raises(RuntimeError, match="Encountering a dict at the output of the tracer"):
        torch.jit.trace(model, x)


def test_onnx_numeric_mismatch_on_large_values():
    report = export_report("logsigmoid", paths=("export", "onnx"), strict_too=False)
    f = only(report, "TP754")
    assert "values x10" in f.message and "torch.export program matches" in f.message
    assert statuses(report)["export"] == "ok" and statuses(report)["onnx"] == "mismatch"


def test_onnx_conversion_failure_names_the_op():
    report = export_report("erfinv", paths=("export", "onnx"), strict_too=False)
    f = only(report, "TP756")
    assert f.severity is Severity.WARNING and "prims.erf_inv" in f.message
    assert statuses(report)["onnx"] == "failed" and statuses(report)["export"] == "ok"


def test_keyword_inputs():
    report = export_report("kwargs_target", paths=("trace", "export", "onnx"), strict_too=False)
    assert codes(report, "warning") == []
    assert {statuses(report)[p] for p in ("trace", "export", "onnx")} == {"ok"}


def test_onnx_path_is_skipped_with_the_install_hint_when_onnx_is_missing(monkeypatch):
    from torchpact.audit import export as export_mod
    from torchpact.audit.export import onnx as onnx_path
    from torchpact.audit.target import load_target

    monkeypatch.setattr(onnx_path, "onnx_missing", lambda: ["onnxruntime"])
    report = export_mod.export_check(load_target(f"{TARGETS}:clean"), paths=("onnx",), budget_s=0.1)
    onnx = report.summary()["paths"]["onnx"]
    assert onnx["status"] == "skipped" and "pip install 'torchpact[export]'" in onnx["reason"]
    assert report.findings == []


def test_variants_eager_itself_rejects_are_left_out_and_listed():
    report = export_report("fixed_batch", paths=("trace",))
    invalid = {v["name"]: v["reason"] for v in report.summary()["variants"] if v["kind"] == "invalid"}
    assert set(invalid) == {"batch=1", "batch=2", "batch=9", "batch=17"}
    assert invalid["batch=1"].startswith("eager raised RuntimeError: shape '[4, 2, 4]' is invalid")
    assert report.paths["trace"].status == "ok" and codes(report, "warning") == []


def test_image_size_is_varied_and_exposes_a_size_read_into_python():
    report = export_report("size_pool", paths=("trace", "export"), strict_too=False)
    assert report.dims.describe() == {"batch": 4, "height": 8, "width": 8}
    assert {"height=1", "height=2", "height=4", "height=17", "height=33", "width=4", "width=17"} <= {
        v.name for v in report.variants}
    assert not report.invalid_variants  # eager pools any image size
    line = marker_line("SIZE_LINE")
    trace = only(report, "TP751")
    assert trace.line == line and "turns a tensor into a Python integer" in trace.message
    fixed = sorted(f.subject for f in report.findings if f.code == "TP752")
    assert fixed == ["x.shape[2]", "x.shape[3]"]
    assert all(f.line == line for f in report.findings if f.code == "TP752")
    # batch sizes alone never showed it
    assert {v.name: v.status for v in report.paths["export"].variants}["batch=9"] == "ok"
    model, (x,) = T.size_pool()
    ep = torch.export.export(model, (x,), dynamic_shapes=({2: torch.export.Dim.AUTO},))
    with pytest.raises(Exception, match=r"Guard failed: x.size\(\)\[2\] == 8"):
        ep.module()(torch.rand(4, 3, 16, 8))
    assert tuple(model(torch.rand(4, 3, 16, 8)).shape) == (4, 4)
