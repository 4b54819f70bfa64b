"""export-check on tiny, randomly initialised configs of real transformers models (nothing downloaded)."""

from __future__ import annotations

import os
import time

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("transformers")

from tests.audit.util import codes, export_report, only


def test_tiny_gpt2_shipped_without_cache_is_clean_and_fast():
    start = time.perf_counter()
    report = export_report("gpt2", file="hf_targets.py")
    elapsed = time.perf_counter() - start
    # a bound against the pathological (minutes spent on a cache or retries), not a speed test: a loaded
    # 2-core machine takes several times as long as a quiet one
    assert elapsed < 600, f"export-check of a tiny GPT-2 took {elapsed:.0f}s"
    assert codes(report, "warning") == []
    paths = report.summary()["paths"]
    assert {n: paths[n]["status"] for n in ("trace", "export", "onnx")} == {"trace": "ok", "export": "ok", "onnx": "ok"}
    assert paths["export"]["strict"]["status"] == "ok"
    assert report.dims.describe() == {"batch": 2, "seq": 8}
    assert {"seq=4", "seq=16", "batch=1", "batch=5"} <= {v["name"] for v in paths["onnx"]["variants"]}
    # TorchScript cannot compile transformers' code: reported, as info
    assert paths["script"]["status"] == "failed"
    assert only(report, "TP756").severity.value == "info"


def test_gpt2_default_output_carries_a_cache_object():
    report = export_report("gpt2_with_cache", file="hf_targets.py", paths=("trace", "export", "onnx"), strict_too=False)
    f = only(report, "TP753")
    assert "DynamicCache object at output.cache" in f.message
    assert "use_cache=False" in f.fix and "return_dict=False" in f.fix
    assert {n: p.status for n, p in report.paths.items() if n != "script"} == {
        "trace": "failed", "export": "failed", "onnx": "failed"}
    assert "DynamicCache" in report.paths["export"].reason


@pytest.mark.parametrize("func", ["bert", "vit"])
def test_bert_and_vit_are_clean(func):
    report = export_report(func, file="hf_targets.py", paths=("trace", "export", "onnx"), strict_too=False)
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
