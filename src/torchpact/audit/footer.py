"""One line per path / mode for the text report's footer, from the plain ``summary`` data.

Only formats what export-check and compile-check computed; ``report.text`` prints the lines.
"""

from __future__ import annotations

from typing import Any


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g} ms"


def export_footer(summary: dict[str, Any], target: str) -> list[str]:
    tried = ", ".join(v["name"] for v in summary["variants"] if v["kind"] != "invalid")
    lines = [f"export-check {target}: inputs varied over {tried}"]
    eager = summary.get("eager_latency_ms") or {}
    if eager:
        lines.append("  eager   " + ", ".join(f"{k} {_p50_p99(v)}" for k, v in eager.items())
                     + " (timed first, before any export)")
    for name, p in summary["paths"].items():
        line = f"  {name:<7} {p['status']:<9}"
        if p["status"] in ("ok", "mismatch") and p.get("latency_ms"):
            lat = p["latency_ms"]
            if lat.get("unstable"):
                line += f" latency not comparable (unstable: {lat['unstable']});"
            else:
                line += (f" p50 {_ms(lat.get('artifact'))} (p99 {_ms(lat.get('artifact_p99'))}) vs eager "
                         f"{_ms(lat.get('eager'))} (p99 {_ms(lat.get('eager_p99'))});")
        line += f" {p['reason']}"
        if name == "export" and p.get("strict"):
            line += f" [strict: {p['strict']['status']}]"
        lines.append(line)
    lines.append(f"  ({summary['seconds']:.1f}s)")
    return lines


def _p50_p99(v: dict[str, Any]) -> str:
    text = f"p50 {_ms(v.get('p50'))} p99 {_ms(v.get('p99'))}"
    return text + (f" (unstable: {v['unstable']})" if v.get("unstable") else "")


def _speedup(v: dict[str, Any]) -> str:
    sp = v.get("speedup")
    return f", eager/mode {sp['ratio']:.2f}x [{sp['low']:.2f}, {sp['high']:.2f}]" if sp else ""


def compile_footer(summary: dict[str, Any], target: str) -> list[str]:
    lines = [f"compile-check {target} on {summary['device']}: {summary['graphs']} graph(s), "
             f"{len(summary['graph_breaks'])} graph break(s)"]
    eager = summary["eager_latency_ms"]
    lines.append("  eager   " + ", ".join(f"{k} {_p50_p99(v)}" for k, v in eager.items()))
    if summary.get("inductor_setup_s") is not None:
        lines.append(f"  inductor setup (once per machine/process, not in the cold compiles): "
                     f"{summary['inductor_setup_s']:.1f}s")
    for mode, m in summary["modes"].items():
        if m["status"] in ("failed", "skipped"):
            lines.append(f"  {mode}: {m['status']}: {m['reason']}")
            continue
        lat = ", ".join(f"{k} {_p50_p99(v)}{_speedup(v)}" for k, v in m["latency_ms"].items())
        cpu = m.get("cold_compile_cpu_s")
        lines.append(f"  {mode}: {m['status']}, cold compile {m['cold_compile_s']:.1f}s"
                     + (f" ({cpu:.1f} CPU s)" if cpu is not None else "")
                     + f", {len(m['recompiles'])} recompile(s); {lat}")
    lines.extend(f"  recommendation: {text}" for text in summary["recommendation"].values())
    lines.append(f"  ({summary['seconds']:.1f}s)")
    return lines
