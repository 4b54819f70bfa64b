"""compile-check's eager timing against export-check's, on a tiny BERT with the same inputs.

Eager must be timed in a clean state: compile-check times it before any dynamo work (after
`torch._dynamo.explain` and `reset()` eager ran ~5x slower). Pass: compile-check's eager p50 is
within 1.5x of export-check's eager p50 on the same example. Also prints what compile-check says
on an LSTM (dynamo captures no graph: nothing may be recommended) and BERT's p50/p99 per mode,
with inductor's one-time setup apart from the cold compiles. Figures depend on the machine's load;
compile-check says when they are unstable.

    python bench/compile_check.py [--threads N] [--budget S]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's setting)")
    parser.add_argument("--budget", type=float, default=0.5, help="seconds of timing per input and mode")
    opts = parser.parse_args()

    import torch

    from torchpact.audit.compile import compile_check
    from torchpact.audit.export import export_check
    from torchpact.audit.target import Target

    threads = opts.threads or torch.get_num_threads()
    print(f"torch {torch.__version__}, {threads} threads, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")

    model, args, kwargs = tiny_bert()
    exported = export_check(Target("bert", model, args, kwargs), paths=("trace", "export"), strict_too=False,
                            threads=threads)
    export_eager = [p.latency_ms["eager"] for p in exported.paths.values() if p.latency_ms]
    start = time.perf_counter()
    compiled = compile_check(Target("bert", *tiny_bert()), threads=threads, budget_s=opts.budget)
    seconds = time.perf_counter() - start
    s = compiled.summary()
    eager = s["eager_latency_ms"]["example"]
    ref = min(export_eager)
    ratio = max(eager["p50"], ref) / min(eager["p50"], ref)
    print(f"BERT (1 layer, 32 wide), example (2, 8): export-check eager p50 {', '.join(f'{x:.3g}' for x in export_eager)} ms;"
          f" compile-check eager p50 {eager['p50']:.3g} ms p99 {eager['p99']:.3g} ms"
          + (f" (unstable: {eager['unstable']})" if eager.get("unstable") else ""))
    print(f"  inductor setup {s['inductor_setup_s']}s (once), compile-check {seconds:.1f}s")
    for mode, m in s["modes"].items():
        lat = m["latency_ms"].get("example") or {}
        print(f"  {mode:<28} {m['status']:<8} cold compile {m['cold_compile_s']}s, example p50 {lat.get('p50')} ms "
              f"p99 {lat.get('p99')} ms" + (f" (unstable: {lat['unstable']})" if lat.get("unstable") else ""))
    for scenario, text in s["recommendation"].items():
        print(f"  recommendation {scenario}: {text}")

    lstm = compile_check(Target("lstm", *tiny_lstm()), threads=threads, budget_s=opts.budget).summary()
    print(f"LSTM: {lstm['graphs']} graph(s); recommendation: {list(lstm['recommendation'].values())}")

    lstm_ok = lstm["graphs"] == 0 and "no recommendation" in " ".join(lstm["recommendation"].values())
    shaky = eager.get("unstable") or any((p.latency_ms or {}).get("unstable") for p in exported.paths.values())
    verdict = "OK" if ratio <= 1.5 and lstm_ok else "FAIL"
    if verdict == "FAIL" and lstm_ok and shaky:
        verdict = "INCONCLUSIVE"  # the machine's load, not the method, decided the ratio: rerun on an idle machine
    print(f"{verdict}: compile-check eager p50 is {ratio:.2f}x export-check's (target <= 1.5x"
          f"{', timings unstable' if shaky else ''}); LSTM recommends nothing: {lstm_ok}")
    sys.exit({"OK": 0, "FAIL": 1, "INCONCLUSIVE": 3}[verdict])


if __name__ == "__main__":
    main()
