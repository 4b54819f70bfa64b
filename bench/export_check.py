"""Time of `export-check` on a tiny GPT-2 against the bare exporter calls it wraps, in one run.

The bare calls are what a user would run once each on the example: `torch.jit.trace`,
`torch.jit.script`, `torch.export.export` (non-strict and strict, batch/sequence `Dim.AUTO`) and
`torch.onnx.export` plus an onnxruntime session. export-check runs the same calls, then every
artifact on each input variant, and times each artifact against eager. Imports and one throw-away
export are done first, so neither side pays them. Target: the whole check under 2 minutes on a
2-core machine.

    python bench/export_check.py [--threads N]

``--agreement`` instead compares export-check's verdict per path with ground truth computed with
plain torch (``tests/audit/ground_truth.py``) on the edge models of ``tests/audit/edge_targets.py``,
at sizes chosen from each model's documented range and never from torchpact's variants, and prints
the agreement per path. Those models were written with the feature: the figures are in-sample.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def tiny_gpt2():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=64, bos_token_id=0,
                        eos_token_id=0)
    return GPT2LMHeadModel(config).eval(), (torch.randint(0, 100, (2, 8)),), {"use_cache": False,
                                                                             "return_dict": False}


class Wrapped:
    """The model with its keyword constants bound, as a user exporting it by hand would write it."""

    @staticmethod
    def make(model, kwargs):
        import torch

        class Bound(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, ids):
                return self.model(ids, **kwargs)

        return Bound().eval()


def bare_calls(model, args, kwargs) -> dict[str, float]:
    import onnxruntime as ort
    import torch
    from torch.export import Dim

    bound = Wrapped.make(model, kwargs)
    dyn = ({0: Dim.AUTO, 1: Dim.AUTO},)
    times: dict[str, float] = {}

    def timed(name, fn):
        start = time.perf_counter()
        try:
            fn()
        except Exception as exc:  # script fails on transformers' code; the attempt is what is timed
            name += f" ({type(exc).__name__})"
        times[name] = time.perf_counter() - start

    timed("torch.jit.trace", lambda: torch.jit.trace(bound, args, check_trace=False))
    timed("torch.jit.script", lambda: torch.jit.script(model))
    timed("torch.export.export", lambda: torch.export.export(bound, args, dynamic_shapes=dyn))
    timed("torch.export.export(strict=True)", lambda: torch.export.export(bound, args, dynamic_shapes=dyn,
                                                                           strict=True))

    def onnx():
        program = torch.onnx.export(bound, args, dynamic_shapes=dyn, verbose=False)
        ort.InferenceSession(program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])

    timed("torch.onnx.export + onnxruntime session", onnx)
    return times


def agreement(threads: int | None) -> bool:
    """export-check's verdict per path and model against plain torch's; True when all agree."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    from tests.audit import edge_targets as E
    from tests.audit import ground_truth as G
    from torchpact.audit.export import export_check
    from torchpact.audit.target import load_target

    expected = {"ok": "ok", "broken": "mismatch", "failed": "failed"}
    agree = {p: 0 for p in G.PATHS}
    print(f"{'model':<18}" + "".join(f"{p:>22}" for p in G.PATHS) + "   (torchpact / plain torch)")
    for func in E.RANGES:
        with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = export_check(load_target(f"{E.__file__}:{func}"), paths=G.PATHS, strict_too=False,
                                  threads=threads or 1)
            truths = {p: G.truth(func, p)["verdict"] for p in G.PATHS}
        cells = []
        for p in G.PATHS:
            got = report.paths[p].status
            same = got == expected[truths[p]]
            agree[p] += same
            cells.append(f"{got} / {truths[p]}{'' if same else ' !!'}")
        print(f"{func:<18}" + "".join(f"{c:>22}" for c in cells), flush=True)
    n = len(E.RANGES)
    print("agreement per path (in-sample): " + ", ".join(f"{p} {agree[p]}/{n}" for p in G.PATHS))
    return all(v == n for v in agree.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's setting)")
    parser.add_argument("--agreement", action="store_true", help="export-check's verdicts against plain-torch "
                        "ground truth on the edge models, per path")
    opts = parser.parse_args()
    if opts.agreement:
        sys.exit(0 if agreement(opts.threads) else 1)

    import torch

    from torchpact.audit.export import export_check
    from torchpact.audit.target import Target

    if opts.threads:
        torch.set_num_threads(opts.threads)
    model, args, kwargs = tiny_gpt2()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bare_calls(model, args, kwargs)  # warm-up: imports, first-call caches
        bare = bare_calls(model, args, kwargs)
    start = time.perf_counter()
    report = export_check(Target("tiny-gpt2", model, args, kwargs))
    checked = time.perf_counter() - start

    total_bare = sum(bare.values())
    print(f"tiny GPT-2 (1 layer, 32 wide), torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{os.cpu_count()} cores")
    for name, seconds in bare.items():
        print(f"  {name:<45} {seconds:7.2f}s")
    print(f"  {'bare exporter calls, total':<45} {total_bare:7.2f}s")
    print(f"  {'torchpact export-check':<45} {checked:7.2f}s  ({checked / total_bare:.1f}x the bare calls; "
          f"{len(report.variants)} input variants per path)")
    for name, p in report.paths.items():
        print(f"    {name:<7} {p.status:<9} {p.seconds:6.2f}s  {p.reason}")
        lat = p.latency_ms or {}
        if lat:
            print(f"            latency p50 {lat.get('artifact')} ms (p99 {lat.get('artifact_p99')}) vs eager "
                  f"{lat.get('eager')} ms (p99 {lat.get('eager_p99')})"
                  + (f"; unstable: {lat['unstable']}" if lat.get("unstable") else ""))
    status = "OK" if checked < 120 else "TOO SLOW"
    print(f"{status}: export-check {checked:.1f}s (target < 120s)")
    sys.exit(0 if checked < 120 else 1)


if __name__ == "__main__":
    main()
