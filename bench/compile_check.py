"""compile-check's eager timing against export-check's, on a tiny BERT with the same inputs.

Each command runs as a user runs it: `torchpact export-check` / `torchpact compile-check` on this
file's `tiny_bert`, each in a fresh process, JSON report. Both time eager with one helper
(`torchpact.audit.timing.eager_latency`), first, in eval mode under no_grad, on the same inputs,
with the same thread count. PASS: compile-check's eager p50 on the example is within 1.5x of every
eager p50 export-check reports for it (its summary and each path's latency). Also prints what
compile-check says on an LSTM (dynamo captures no graph: nothing may be recommended) and BERT's
p50/p99 per mode, with inductor's one-time setup apart from the cold compiles.

One torch thread by default: on a shared 2-core machine two threads wait on each other's core at
every op, and the figures measure the scheduler rather than the model (`--threads N` to change).

    python bench/compile_check.py [--threads N] [--modes default,max-autotune-no-cudagraphs]

``--stability N`` runs compile-check N times (each a fresh process) on a model with a steady gain
(the tiny BERT: many small ops inductor fuses) and one with none (one large matmul, which eager and
inductor both hand to the same GEMM), and prints each run's verdict with the paired intervals and
the machine's load. PASS: one verdict per model over the N runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

HERE = Path(__file__).resolve()
TARGET_RATIO = 1.5


def tiny_bert():
    import torch
    from transformers import BertConfig, BertModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    ids = torch.randint(0, 100, (2, 8))
    return BertModel(config).eval(), (), {"input_ids": ids, "attention_mask": torch.ones(2, 8, dtype=torch.long),
                                          "return_dict": False}


def tiny_lstm():
    import torch
    from torch import nn

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(6, 16, num_layers=2, batch_first=True)
            self.head = nn.Linear(16, 3)

        def forward(self, x):
            return self.head(self.rnn(x)[0])

    torch.manual_seed(0)
    return Tagger().eval(), (torch.randn(2, 10, 6),), {}


def one_gemm():
    import torch

    torch.manual_seed(0)
    return torch.nn.Linear(1024, 1024).eval(), (torch.randn(64, 1024),), {}


def _verdict(text: str) -> str:
    """The kind of a recommendation sentence: the mode it names, or none."""
    if "no recommendation" in text:
        return "no recommendation"
    m = re.search(r"mode='([^']+)'", text)
    return f"mode={m.group(1)}" if m else text[:60]


def stability(runs: int, threads: list[str], modes: str) -> bool:
    steady = True
    for func in ("tiny_bert", "one_gemm"):
        verdicts = []
        for i in range(runs):
            load = os.getloadavg()[0]
            summary, seconds = torchpact("compile-check", func, "--modes", modes, *threads)
            rec = summary["recommendation"]
            kinds = {s: _verdict(rec[s]) for s in ("latency", "throughput")}
            verdicts.append(tuple(kinds.values()))
            intervals = {label: (e.get("speedup"), e.get("cpu_speedup"))
                         for m in summary["modes"].values() for label, e in (m.get("latency_ms") or {}).items()}
            print(f"{func} run {i + 1}: load {load:.1f}, {seconds:.0f}s; " + "; ".join(
                f"{s}: {k}" for s, k in kinds.items()), flush=True)
            for label, (wall, cpu) in intervals.items():
                print(f"    {label}: eager/mode wall {_iv(wall)}, cpu {_iv(cpu)}", flush=True)
        same = len(set(verdicts)) == 1
        steady &= same
        print(f"{func}: {'same' if same else 'DIFFERENT'} verdict in {runs} runs: {sorted(set(verdicts))}", flush=True)
    return steady


def _iv(x: dict | None) -> str:
    return f"{x['ratio']:.2f}x [{x['low']:.2f}, {x['high']:.2f}]" if x else "-"


def torchpact(command: str, func: str, *options: str) -> tuple[dict, float]:
    """The command's JSON summary (a fresh process, as a user runs it) and its wall seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "torchpact", command, f"{HERE}:{func}", *options,
                               "--format", "json", "--output", str(out)],
                              capture_output=True, text=True, timeout=1800)
        seconds = time.perf_counter() - start
        if proc.returncode not in (0, 1):
            sys.exit(f"torchpact {command} {func} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        return json.loads(out.read_text())["summary"], seconds


def _lat(x: dict) -> str:
    return (f"p50 {x.get('p50')} ms p99 {x.get('p99')} ms"
            + (f" (unstable: {x['unstable']})" if x.get("unstable") else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads in both commands (default: 1)")
    parser.add_argument("--modes", default="default", help="compile modes for BERT (default: default)")
    parser.add_argument("--stability", type=int, metavar="N", help="run compile-check N times on a model with a "
                        "steady gain and one with none; PASS when each keeps one verdict")
    opts = parser.parse_args()

    import torch

    threads = ["--threads", str(opts.threads)]
    print(f"torch {torch.__version__}, {opts.threads} thread(s), {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    if opts.stability:
        ok = stability(opts.stability, threads, opts.modes)
        print("PASS" if ok else "FAIL")
        sys.exit(0 if ok else 1)

    exported, export_s = torchpact("export-check", "tiny_bert", "--paths", "trace,export", *threads)
    compiled, compile_s = torchpact("compile-check", "tiny_bert", "--modes", opts.modes, *threads)
    eager = compiled["eager_latency_ms"]["example"]
    figures = {"export-check summary": exported["eager_latency_ms"]["example"]["p50"]}
    figures.update({f"export-check {name} path": p["latency_ms"]["eager"]
                    for name, p in exported["paths"].items() if p.get("latency_ms")})
    ratios = {who: max(eager["p50"], x) / min(eager["p50"], x) for who, x in figures.items()}

    print("BERT (1 layer, 32 wide), example (2, 8), eager in a fresh process per command:")
    print(f"  compile-check eager example {_lat(eager)} ({compile_s:.0f}s)")
    print(f"  export-check  eager example {_lat(exported['eager_latency_ms']['example'])} ({export_s:.0f}s)")
    for name, p in exported["paths"].items():
        lat = p.get("latency_ms") or {}
        if lat:
            print(f"    {name:<7} artifact p50 {lat.get('artifact')} ms vs eager {lat.get('eager')} ms"
                  + (f" (unstable: {lat['unstable']})" if lat.get("unstable") else ""))
    print(f"  inductor setup {compiled['inductor_setup_s']}s (once)")
    for mode, m in compiled["modes"].items():
        lat = m["latency_ms"].get("example") or {}
        print(f"  {mode:<28} {m['status']:<8} cold compile {m['cold_compile_s']}s, example {_lat(lat)}")
    for scenario, text in compiled["recommendation"].items():
        print(f"  recommendation {scenario}: {text}")

    lstm, _ = torchpact("compile-check", "tiny_lstm", *threads)
    lstm_ok = lstm["graphs"] == 0 and "no recommendation" in " ".join(lstm["recommendation"].values())
    print(f"LSTM: {lstm['graphs']} graph(s); recommendation: {list(lstm['recommendation'].values())}")

    worst = max(ratios, key=ratios.get)
    ok = ratios[worst] <= TARGET_RATIO and lstm_ok
    print(f"{'PASS' if ok else 'FAIL'}: compile-check eager p50 {eager['p50']} ms vs "
          + ", ".join(f"{who} {x} ms ({ratios[who]:.2f}x)" for who, x in figures.items())
          + f"; worst {ratios[worst]:.2f}x (target <= {TARGET_RATIO}x); LSTM recommends nothing: {lstm_ok}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
