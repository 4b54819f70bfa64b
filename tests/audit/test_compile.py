"""compile-check: graph breaks on their line, recompiles with the failed guard, latency per mode."""

from __future__ import annotations

from functools import cache

from tests.audit.util import TARGETS, marker_line
from torchpact.audit.compile import CPU_MODES, compile_check
from torchpact.audit.target import load_target
from torchpact.findings import Severity


@cache
def report():
    return compile_check(load_target(f"{TARGETS}:item_break"), modes=CPU_MODES, threads=1, budget_s=0.2)


def test_graph_break_is_found_on_its_line_with_dynamos_reason():
    r = report()
    breaks = [f for f in r.findings if f.code == "TP851"]
    assert len(breaks) == 1
    f = breaks[0]
    assert f.line == marker_line("BREAK_LINE") and f.path.endswith("targets.py")
    assert "Tensor.item()" in f.message and "capture_scalar_outputs=False" in f.message
    assert r.summary()["graph_breaks"][0]["line"] == f.line


def test_recompilations_name_the_variant_and_the_failed_guard():
    r = report()
    recompiles = [f for f in r.findings if f.code == "TP852"]
    assert recompiles and all(f.severity is Severity.INFO for f in recompiles)
    forward = next(f for f in recompiles if "recompiled forward" in f.message)
    assert "batch=1: tensor 'x' size mismatch at index 0. expected 4, actual 1" in forward.message
    # after the break the resumed function is compiled (and recompiled) on its own
    assert any("torch_dynamo_resume_in_forward" in f.message for f in recompiles)
    default = r.summary()["modes"]["default"]
    assert {rc["variant"] for rc in default["recompiles"]} >= {"batch=1", "batch=9"}


def test_every_cpu_mode_is_measured_and_matches_eager():
    summary = report().summary()
    assert set(summary["modes"]) == set(CPU_MODES)
    for mode in summary["modes"].values():
        assert mode["status"] == "ok" and mode["cold_compile_s"] > 0
        assert set(mode["latency_ms"]) == {"example", "batch=1", "batch=9"}
        for lat in mode["latency_ms"].values():
            assert 0 < lat["p50"] <= lat["p99"]
        assert mode["max_abs_err"] < 1e-4
    assert set(summary["eager_latency_ms"]) == {"example", "batch=1", "batch=9"}
    assert not [f for f in report().findings if f.code in ("TP853", "TP854")]


def test_recommendation_is_grounded_in_the_measurements():
    summary = report().summary()
    rec = summary["recommendation"]
    assert set(rec) == {"latency", "throughput", "cuda_graphs"}
    eager = summary["eager_latency_ms"]["batch=1"]["p50"]
    assert f"{eager:.3g} ms" in rec["latency"]
    assert "re-recorded for every new input shape" in rec["cuda_graphs"] and "default mode does not" in rec["cuda_graphs"]


def test_cuda_graph_modes_are_skipped_on_cpu():
    r = compile_check(load_target(f"{TARGETS}:clean"), modes=("reduce-overhead", "max-autotune"), threads=1,
                      budget_s=0.05)
    for mode in r.summary()["modes"].values():
        assert mode["status"] == "skipped" and "uses CUDA graphs; the model is on cpu" in mode["reason"]
