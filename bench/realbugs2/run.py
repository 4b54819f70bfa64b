"""Blind set of real silent bugs, reproduced on CPU: does `torchpact run` name their cause?

Twelve silent training bugs from public reports nobody tuned torchpact on (issue 31, "a blind set of
your own"), each written here from scratch as a small synthetic-data script in ``cases/`` that runs
as ``buggy`` or ``fixed``. A case is *detected* when the buggy run reports one of the codes that name
its cause; its fixed run must report no warning or error (``bench/casebench.py`` runs them). Causes
no check names yet carry the code a new check would use, ``new:<name>``, and count as missed.

    .venv/bin/python bench/realbugs2/run.py [CASE ...] [--json FILE]
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from casebench import Case, main  # noqa: E402

CASES = (
    Case("gandlf_870", "features and labels shuffled with two different permutations",
         ("TP568",), source="mlcommons/GaNDLF#870"),
    Case("pytorch_tutorial_196", "(batch, seq, feature) input to an LSTM without batch_first",
         ("TP360",), source="yunjey/pytorch-tutorial#196"),
    Case("transformer_from_scratch_4", "attention heads merged by reshape without the permute: future tokens leak",
         ("TP468",), source="jsbaan/transformer-from-scratch#4"),
    Case("yi_110", "padding token ids left in the labels, no ignore_index",
         ("TP569",), source="01-ai/Yi#110"),
    Case("nanochat_59", "gradient accumulation averages per-micro-batch token means of unequal counts",
         ("TP479",), source="karpathy/nanochat#59"),
    Case("srgan_1", "epoch-level StepLR stepped every batch",
         ("TP466",), source="Lornatang/SRGAN-PyTorch#1"),
    Case("vision_8250", "BatchNorm momentum=0.99 (TensorFlow's convention)",
         ("TP465",), source="pytorch/vision#8250"),
    Case("farm_229", "MSE loss broadcasting (N,) against (N, 1)", ("TP355",), source="deepset-ai/FARM#229"),
    Case("sprompts_2", "frozen parameters still moved by the optimizer's weight decay",
         ("TP452",), source="iamwangyabin/S-Prompts#2"),
    Case("fairmot_223", "a classifier (in the loss module) missing from the optimizer",
         ("TP451",), source="ifzhang/FairMOT#223"),
    Case("vaal_2", "test accuracy measured in train mode (dropout, BatchNorm)", ("TP453",), source="sinhasam/vaal#2"),
    Case("parallelwavegan_177", "DistributedSampler iterated without set_epoch",
         ("TP501",), nproc=2, source="kan-bayashi/ParallelWaveGAN#177"),
)

if __name__ == "__main__":
    sys.exit(main(CASES, HERE / "cases", __doc__.splitlines()[0]))
