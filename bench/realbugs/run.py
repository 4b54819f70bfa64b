"""Real silent bugs, reproduced on CPU: does `torchpact run` name their cause, and stay quiet on the fix?

The cases adapt the CPU-reproducible bugs of the TrainCheck benchmark (OSDI'25,
OrderLab/TrainCheck-Evaluation-Workloads, silent-issue-detection) to small, synthetic-data scripts
in ``cases/``; each keeps the bug and runs as ``buggy`` or ``fixed``. A case is *detected* when the
buggy run reports one of the codes that name its cause; its fixed run must report no warning or
error (``bench/casebench.py`` runs them).

    .venv/bin/python bench/realbugs/run.py [CASE ...] [--json FILE]
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from casebench import Case, main  # noqa: E402

CASES = (
    Case("pytorch_forum_84911", "new head frozen with the backbone", ("TP459",)),
    Case("stackoverflow_60335387", "optimizer.zero_grad() missing", ("TP401",)),
    Case("pytorch_115607", "step no longer updates the parameters", ("TP454",)),
    Case("mmpretrain_702", "train() override with frozen_stages never ran", ("TP457",)),
    Case("transformers_17877", "init re-run over trained weights", ("TP456",)),
    Case("transformers_33844", "attention dropout on in eval mode", ("TP458",)),
    Case("stackoverflow_67180955", "same RNG state in every DataLoader worker", ("TP550",)),
    Case("pytorch_104336", "DDP model converted after wrapping: hooks lost", ("TP657",), nproc=2),
    Case("x_jxmnop_ddp_out_of_sync", "model only sometimes wrapped in DDP", ("TP602", "TP652"), nproc=2),
    Case("deepspeed_1801", "rank-local clipping desynchronises replicas", ("TP652",), nproc=2),
    Case("pytorch_51800", "spectral_norm model evaluated before its first training forward",
         ("TP467",)),
)

if __name__ == "__main__":
    sys.exit(main(CASES, HERE / "cases", __doc__.splitlines()[0]))
