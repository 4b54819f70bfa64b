"""compile-check: graph breaks on their line, recompiles with the failed guard, latency per mode."""

from __future__ import annotations

from functools import cache

from tests.audit.util import HERE, TARGETS, marker_line
from torchpact.audit import timing as T
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
    assert {rc["variant"] for rc in default["recompiles"]} >= {"batch=1", "batch=2"}


def test_every_cpu_mode_is_measured_and_matches_eager():
    summary = report().summary()
    assert set(summary["modes"]) == set(CPU_MODES)
    for mode in summary["modes"].values():
        assert mode["status"] == "ok" and mode["cold_compile_s"] > 0 and mode["cold_compile_cpu_s"] > 0
        assert set(mode["latency_ms"]) == {"example", "batch=1", "batch=17"}
        for lat in mode["latency_ms"].values():
            assert 0 < lat["p50"] <= lat["p99"] and lat["cpu_ms"] > 0 and lat["eager_p50"] > 0
            # eager timed in the same rounds as the mode: a paired ratio with its interval, wall and CPU
            for key in ("speedup", "cpu_speedup"):
                assert lat[key]["low"] <= lat[key]["ratio"] <= lat[key]["high"] and lat[key]["rounds"] == 15
        assert mode["max_abs_err"] < 1e-4
    assert set(summary["eager_latency_ms"]) == {"example", "batch=1", "batch=17"}
    assert not [f for f in report().findings if f.code in ("TP853", "TP854")]


def test_recommendation_is_grounded_in_the_measurements():
    summary = report().summary()
    rec = summary["recommendation"]
    assert set(rec) == {"latency", "throughput", "cuda_graphs"}
    ratios = [m["latency_ms"]["batch=1"]["speedup"]["ratio"] for m in summary["modes"].values()]
    assert any(f"{r:.2f}x" in rec["latency"] for r in ratios)
    assert "re-recorded for every new input shape" in rec["cuda_graphs"]
    assert "default mode does not" in rec["cuda_graphs"]


def test_cuda_graph_modes_are_skipped_on_cpu():
    r = compile_check(load_target(f"{TARGETS}:clean"), modes=("reduce-overhead", "max-autotune"), threads=1,
                      budget_s=0.05)
    for mode in r.summary()["modes"].values():
        assert mode["status"] == "skipped" and "uses CUDA graphs; the model is on cpu" in mode["reason"]


@cache
def lstm_report():
    return compile_check(load_target(f"{HERE / 'arch_targets.py'}:lstm"), modes=CPU_MODES, threads=1, budget_s=0.1)


def test_lstm_compiles_nothing_and_nothing_is_recommended():
    r = lstm_report()
    f = [f for f in r.findings if f.code == "TP855"]
    assert len(f) == 1 and f[0].severity is Severity.WARNING
    assert "torch._dynamo.config.allow_rnn is False" in f[0].message and "LSTM" in f[0].message
    assert "allow_rnn = True" in f[0].fix
    summary = r.summary()
    assert summary["graphs"] == 0
    assert all(m["status"] == "skipped" and "captured no graph" in m["reason"] for m in summary["modes"].values())
    assert list(summary["recommendation"].values()) == [
        "no recommendation: torch.compile captured no graph, so every mode runs the model eagerly (see TP855)"]
    assert set(summary["eager_latency_ms"]) >= {"example"}


def test_what_dynamo_does_with_an_lstm_on_torch_2_13():
    import torch

    from tests.audit.arch_targets import lstm

    model, (x,) = lstm()
    assert torch._dynamo.config.allow_rnn is False
    torch._dynamo.reset()
    assert torch._dynamo.explain(model)(x).graph_count == 0
    with torch._dynamo.config.patch(allow_rnn=True):
        torch._dynamo.reset()
        assert torch._dynamo.explain(model)(x).graph_count == 1
    torch._dynamo.reset()


def test_stability_is_judged_on_the_tail_and_on_the_spread_of_repeats():
    steady = [[1.0, 1.02, 0.98, 1.01] * 5 for _ in range(3)]
    assert T.instability(steady) is None
    tail = [[1.0] * 20 + [9.0] for _ in range(3)]  # one call in 21 nine times slower: p99 >> p50
    assert "p99 is" in T.instability(tail)
    drift = [[1.0] * 20, [1.0] * 20, [1.6] * 20]  # a repeat under load
    assert T.instability(drift) == "the p50s of 3 repeats spread 60%"
    stats = T.latency_stats(drift)
    assert stats["p50"] == 1.0 and stats["calls"] == 60 and stats["repeats"] == 3 and "unstable" in stats


def test_paired_rounds_alternate_the_order_and_the_interval_is_of_the_log_mean():
    from torchpact.audit.paired import paired, ratio_interval

    calls = []
    result = paired(lambda: calls.append("a"), lambda: calls.append("b"), budget_s=0.0, rounds=4)
    timed = calls[6 + 2:]  # after three warm-up pairs and one call of each to size the blocks
    n = result["calls_per_block"]
    blocks = [timed[i:i + n] for i in range(0, len(timed), n)]
    assert [b[0] for b in blocks] == ["a", "b", "b", "a", "a", "b", "b", "a"] and all(len(set(b)) == 1 for b in blocks)
    same = ratio_interval([2.0, 2.0, 2.0])
    assert (round(same.ratio, 6), round(same.low, 6), round(same.high, 6)) == (2.0, 2.0, 2.0)
    spread = ratio_interval([1.0, 4.0])  # geometric mean 2; t(1) = 12.71 on a log sd of ln(4)/sqrt(2)
    assert round(spread.ratio, 6) == 2.0 and spread.low < 1 < 4 < spread.high
    assert ratio_interval([1.5]) is None


def _mode(mode, ratio, low, high):
    from torchpact.audit.compile import ModeResult

    speedup = {"ratio": ratio, "low": low, "high": high, "rounds": 15}
    lat = {"p50": 1.0 / ratio, "p99": 1.2 / ratio, "cpu_ms": 1.0, "eager_p50": 1.0, "eager_cpu_ms": 1.0,
           "speedup": speedup, "cpu_speedup": speedup, "rounds": 15}
    return ModeResult(mode, "ok", cold_compile_s=3.0, cold_compile_cpu_s=2.5, latency_ms={"example": lat})


def test_a_mode_is_recommended_only_when_its_interval_clears_the_margin():
    from torchpact.audit.compile import recommend
    from torchpact.audit.variants import Dims, Variant

    timing = {"example": Variant("example", "example", (), {})}
    eager = {"example": {"p50": 1.0, "p99": 1.2}}

    def verdict(*modes):
        return recommend({m[0]: _mode(*m) for m in modes}, eager, timing, "cpu", Dims())["throughput"]

    text = verdict(("default", 1.5, 1.3, 1.7))
    assert "mode='default'" in text and "1.50x faster, 95% interval [1.30, 1.70]" in text
    assert "cold compile of 2.5 CPU seconds" in text
    # the same gain, but the interval reaches under the 1.10x margin: noise, with the interval
    text = verdict(("default", 1.5, 0.9, 2.5))
    assert "no recommendation: noise" in text and "default 1.50x [0.90, 2.50]" in text and "mode=" not in text
    # no mode reaches the margin even at its upper end: still no recommendation, the same words
    text = verdict(("default", 1.0, 0.97, 1.03), ("max-autotune-no-cudagraphs", 0.9, 0.8, 1.05))
    assert "no recommendation: noise" in text and "max-autotune-no-cudagraphs 0.90x [0.80, 1.05]" in text
    assert "slower than eager" not in text
    assert "every mode measured slower" in verdict(("default", 0.8, 0.7, 0.9))
    # two modes clear it: default is kept within 10% of the fastest
    assert "mode='default'" in verdict(("default", 1.45, 1.3, 1.6), ("max-autotune-no-cudagraphs", 1.5, 1.35, 1.65))
