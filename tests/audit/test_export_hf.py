"""export-check on tiny, randomly initialised configs of real transformers models (nothing downloaded)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("transformers")

from tests.audit.util import codes, export_report, only


def test_tiny_gpt2_shipped_without_cache_is_clean():
    # its speed is measured in bench/export_check.py: a test on a shared machine asserts no timing
    report = export_report("gpt2", file="hf_targets.py")
    assert codes(report, "warning") == []
    paths = report.summary()["paths"]
    assert {n: paths[n]["status"] for n in ("trace", "export", "onnx")} == {"trace": "ok", "export": "ok", "onnx": "ok"}
    assert paths["export"]["strict"]["status"] == "ok"
    assert report.dims.describe() == {"batch": 2, "seq": 8}
    assert {"seq=1", "seq=2", "seq=4", "seq=17", "seq=33", "batch=1", "batch=5", "batch=9"} <= {
        v["name"] for v in paths["onnx"]["variants"]}
    # TorchScript cannot compile transformers' code: reported, as info
    assert paths["script"]["status"] == "failed"
    assert only(report, "TP756").severity.value == "info"
    # the function whose source torch.jit.script could not get is named, as torch names it
    assert "the source of GPT2Config.__init__ is not available" in paths["script"]["reason"]
    assert paths["script"]["errors"][0]["at"] == "build"
    assert "Failed to get source for <function GPT2Config.__init__" in paths["script"]["errors"][0]["error"]


def test_gpt2_default_output_carries_a_cache_object():
    report = export_report("gpt2_with_cache", file="hf_targets.py", paths=("trace", "export", "onnx"), strict_too=False)
    f = only(report, "TP753")
    assert "DynamicCache object at output.cache" in f.message
    assert "use_cache=False" in f.fix and "return_dict=False" in f.fix
    assert {n: p.status for n, p in report.paths.items() if n != "script"} == {
        "trace": "failed", "export": "failed", "onnx": "failed"}
    assert "DynamicCache" in report.paths["export"].reason


def test_bert_is_clean_on_every_path():
    # trace and torch.export of ViT and more architectures: test_architectures.py, against ground truth
    report = export_report("bert", file="hf_targets.py", paths=("trace", "export", "onnx"), strict_too=False)
    assert codes(report, "warning") == []
    assert {n: p.status for n, p in report.paths.items() if n != "script"} == {
        "trace": "ok", "export": "ok", "onnx": "ok"}


def test_what_torch_says_about_the_cache_object():
    import torch

    from tests.audit.hf_targets import gpt2_with_cache

    model, (ids,) = gpt2_with_cache()
    with pytest.raises(RuntimeError, match=r"Found <class 'transformers\.cache_utils\.DynamicCache'> in output, "
                                           r"which is not a known type"):
        torch.export.export(model, (ids,))
    with pytest.raises(RuntimeError, match="Tracer cannot infer type of CausalLMOutputWithCrossAttentions"):
        torch.jit.trace(model, (ids,), check_trace=False, strict=False)
    # the fix the finding gives works: no cache object, and torch.export takes it
    ep = torch.export.export(model, (ids,), {"use_cache": False, "return_dict": False})
    assert torch.allclose(ep.module()(ids, use_cache=False, return_dict=False)[0],
                          model(ids, use_cache=False, return_dict=False)[0], atol=1e-5)
