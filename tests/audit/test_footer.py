"""The text footer of export-check / compile-check, from recorded summaries: unstable numbers are
said to be unstable, never compared."""

from __future__ import annotations

from torchpact.audit.footer import compile_footer, export_footer


def _export_summary(latency):
    return {"variants": [{"name": "example", "kind": "example"}], "seconds": 1.0,
            "paths": {"trace": {"status": "ok", "reason": "matches eager on 1 input variants", "latency_ms": latency}}}


def test_export_latency_is_compared_only_when_stable():
    stable = {"artifact": 0.2, "eager": 0.1, "artifact_p99": 0.3, "eager_p99": 0.15}
    line = export_footer(_export_summary(stable), "m.py:f")[1]
    assert "p50 0.2 ms (p99 0.3 ms) vs eager 0.1 ms (p99 0.15 ms)" in line
    # the table of the issue: "trace 24.1 ms vs eager 0.077 ms", measured under load
    shaky = {"artifact": 24.1, "eager": 0.077, "artifact_p99": 90.0, "eager_p99": 0.5,
             "unstable": "artifact: p99 is 3.7x p50; eager: p99 is 6.5x p50"}
    line = export_footer(_export_summary(shaky), "m.py:f")[1]
    assert "latency not comparable (unstable: artifact: p99 is 3.7x p50" in line and "24.1" not in line


def test_compile_footer_shows_p99_unstable_and_inductor_setup_apart():
    summary = {"device": "cpu", "graphs": 1, "graph_breaks": [], "seconds": 9.0, "inductor_setup_s": 132.0,
               "eager_latency_ms": {"example": {"p50": 1.5, "p99": 9.0, "unstable": "p99 is 6.0x p50"}},
               "modes": {"default": {"status": "ok", "cold_compile_s": 4.0, "recompiles": [],
                                     "latency_ms": {"example": {"p50": 0.4, "p99": 0.5}}}},
               "recommendation": {"latency": "no recommendation: noise"}}
    lines = compile_footer(summary, "m.py:f")
    assert "example p50 1.5 ms p99 9 ms (unstable: p99 is 6.0x p50)" in lines[1]
    assert "inductor setup" in lines[2] and "132.0s" in lines[2]
    assert "cold compile 4.0s" in lines[3]


def test_export_footer_shows_the_clean_eager_figures_as_compile_check_does():
    summary = _export_summary({"artifact": 0.2, "eager": 1.5, "artifact_p99": 0.3, "eager_p99": 9.0})
    summary["eager_latency_ms"] = {"example": {"p50": 1.5, "p99": 9.0, "unstable": "p99 is 6.0x p50"}}
    lines = export_footer(summary, "m.py:f")
    assert lines[1] == ("  eager   example p50 1.5 ms p99 9 ms (unstable: p99 is 6.0x p50) "
                        "(timed first, before any export)")
    assert lines[2].lstrip().startswith("trace")
