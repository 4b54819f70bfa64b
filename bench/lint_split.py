"""The written-down split of the lint corpus into a tuning part and blind parts (issue 30).

Rule, fixed on 2026-12-05 before any rule was changed for it:
- the 12 projects the team had already read and judged (``bench/corpus_judgement.csv``, the corpus of
  earlier rounds) are in-sample: they belong to the tuning part;
- the 15 projects ``../shared/corpus/fetch.sh`` added since are sorted by name; odd positions (1st,
  3rd, ...) join the tuning part, even positions (2nd, 4th, ...) are **blind round 1**;
- **blind round 2** is eight further projects from the package index that are in no corpus here
  (``bench/lint_blind/fetch_round2.sh``), unpacked and never linted or read until the final build of
  this round is measured on them;
- **blind round 3** (fixed on 2026-12-06, after the round-2 fixes and before linting it) is eight more
  projects from the package index that are in none of the lists above and under neither
  ``/work/corpus`` nor ``/work/corpus-round2`` (``bench/lint_blind/fetch_round3.sh``, pinned releases),
  chosen from the candidates issue 30's round-3 brief named, mixing libraries (peft, pytorch-ignite,
  timm), training recipes (trl), RL (tianshou) and domain packages (pykeen, sbi, torchgeo); they are
  linted once with main 29ef462 and read only for that measurement;
- **blind round 4** (fixed on 2026-12-06, after the round-3 fixes and before linting it) is eight more
  projects from the package index that are in none of the lists above and under none of
  ``/work/corpus``, ``/work/corpus-round2`` and ``/work/corpus-round3`` (``bench/lint_blind/fetch_round4.sh``,
  pinned releases; the sdist where the index has one, torchtune's wheel otherwise), chosen from the
  candidates issue 30's round-4 brief named, mixing libraries (e3nn, avalanche-lib), training recipes
  (torchtune, ultralytics), RL (skrl) and domain packages (asteroid, braindecode, neuralforecast); they
  are linted once with main 080c7e8 and read only for that measurement;
- **blind round 5** (fixed on 2026-12-06, after the round-4 fixes and the pooled gate, before linting it)
  is eight more projects from the package index that are in none of the lists above and under none of
  ``/work/corpus``, ``/work/corpus-round2``, ``/work/corpus-round3`` and ``/work/corpus-round4``
  (``bench/lint_blind/fetch_round5.sh``, pinned releases, all sdists), chosen from the candidates issue
  30's round-5 brief named plus one RL library, mixing libraries (torchdiffeq, torchsde,
  segmentation-models-pytorch), training recipes and examples (lightning-bolts, denoising-diffusion-pytorch),
  RL (d3rlpy) and domain packages (openunmix, torch-audiomentations); they are linted once with main
  f343d24 and read only for that measurement;
- **blind round 6** (fixed on 2026-12-06, after round 5's pooled gate and before linting it) is eight more
  projects from the package index that are in none of the lists above and under none of ``/work/corpus``
  and ``/work/corpus-round2`` to ``/work/corpus-round5`` (``bench/lint_blind/fetch_round6.sh``, pinned
  releases; the sdist where the index gives one, the wheel for pytorch-tabnet and pytorch-widedeep),
  chosen from the candidates issue 30's round-6 brief named, preferring projects with training scripts,
  tools and tests: libraries (x-transformers, vector-quantize-pytorch, pytorch-optimizer, torchcde),
  training recipes with configs and tools (mmpretrain) and domain packages (pythae, pytorch-tabnet,
  pytorch-widedeep); they are linted once with main df7825e and read only for that measurement;
- **blind round 7** (fixed on 2026-12-06, after round 6's pooled gate and before linting it) is eight more
  projects from the package index that are in none of the lists above and under none of ``/work/corpus``
  and ``/work/corpus-round2`` to ``/work/corpus-round6`` (``bench/lint_blind/fetch_round7.sh``, pinned
  releases, the sdist where the index gives one, the wheel for allennlp), chosen by field without reading
  their code: differential privacy training (opacus), RL (pfrl), probabilistic models (normflows), tabular
  (pytorch-tabular), audio (demucs), graph learning (torch-geometric-temporal), an NLP training library
  (allennlp) and video (pytorchvideo); they are linted once with main 41f4947 and read only for that
  measurement;
- **blind round 8** (fixed on 2026-12-06, after round 7's pooled gate and before linting it) is eight more
  projects from the package index that are in none of the lists above and under none of ``/work/corpus``
  and ``/work/corpus-round2`` to ``/work/corpus-round7`` (``bench/lint_blind/fetch_round8.sh``, pinned
  releases, the sdist where the index gives one that ``unpack_releases.sh`` can take, the wheel for
  torchgan, tts and yolov5), chosen by field without reading their code: object detection and segmentation
  training scripts (yolov5), speech synthesis (tts), recommender systems (recbole), time series imputation
  (pypots), generative adversarial training (torchgan), RL (rl-games), graph learning (dive-into-graphs)
  and scientific ML (neuraloperator); they are linted once with main dec94b8 and read only for that
  measurement;
- **blind round 9** (fixed on 2026-12-06, after round 8's pooled gate and before linting it) is eight more
  projects from the package index that are in none of the lists above and under none of ``/work/corpus``
  and ``/work/corpus-round2`` to ``/work/corpus-round8`` (``bench/lint_blind/fetch_round9.sh``, pinned
  releases, the sdist where the index gives one that ``unpack_releases.sh`` can take, the wheel for python-doctr
  and torch-points3d; cleanrl, first chosen for RL, has no release for this Python and gave way to elegantrl),
  chosen by field without reading their code: self-supervised learning (solo-learn), medical image
  segmentation (nnunetv2), OCR (python-doctr), speech enhancement (deepfilternet), diffusion (k-diffusion),
  RL (elegantrl), NLP fine-tuning (simpletransformers) and point clouds (torch-points3d);
  they are linted once with main fd89a93 and read only for that measurement.

Rules are tuned on TUNING only. A blind part is measured once (every error and warning read), its
verdicts recorded in ``bench/lint_blind/``; after what it taught is fixed it is spent, and says so.
"""

from __future__ import annotations

READ_BEFORE = ("fastai", "lightly", "mmengine", "mosaicml", "open-clip-torch", "pytorch-lightning",
               "sentence-transformers", "skorch", "stable-baselines3", "torch-geometric", "torchrl",
               "transformers")
NEW = ("botorch", "colossalai", "darts", "deepspeed", "espnet", "fairseq2", "flair", "gpytorch", "mmdet",
       "nemo-toolkit", "pyannote-audio", "pyro-ppl", "pytorch-forecasting", "torchao", "tsai")

BLIND_ROUND1 = tuple(sorted(NEW)[1::2])
TUNING = tuple(sorted(READ_BEFORE + tuple(sorted(NEW)[0::2])))
BLIND_ROUND2 = ("accelerate", "captum", "diffusers", "kornia", "monai", "pytorch-metric-learning",
                "speechbrain", "torchmetrics")
BLIND_ROUND3 = ("peft", "pykeen", "pytorch-ignite", "sbi", "tianshou", "timm", "torchgeo", "trl")
BLIND_ROUND4 = ("asteroid", "avalanche-lib", "braindecode", "e3nn", "neuralforecast", "skrl", "torchtune",
                "ultralytics")
BLIND_ROUND5 = ("d3rlpy", "denoising-diffusion-pytorch", "lightning-bolts", "openunmix",
                "segmentation-models-pytorch", "torch-audiomentations", "torchdiffeq", "torchsde")
BLIND_ROUND6 = ("mmpretrain", "pythae", "pytorch-optimizer", "pytorch-tabnet", "pytorch-widedeep", "torchcde",
                "vector-quantize-pytorch", "x-transformers")
BLIND_ROUND7 = ("allennlp", "demucs", "normflows", "opacus", "pfrl", "pytorch-tabular", "pytorchvideo",
                "torch-geometric-temporal")
BLIND_ROUND8 = ("dive-into-graphs", "neuraloperator", "pypots", "recbole", "rl-games", "torchgan", "tts",
                "yolov5")
BLIND_ROUND9 = ("deepfilternet", "elegantrl", "k-diffusion", "nnunetv2", "python-doctr", "simpletransformers",
                "solo-learn", "torch-points3d")

if __name__ == "__main__":
    for name in ("TUNING", "BLIND_ROUND1", "BLIND_ROUND2", "BLIND_ROUND3", "BLIND_ROUND4", "BLIND_ROUND5",
                 "BLIND_ROUND6", "BLIND_ROUND7", "BLIND_ROUND8", "BLIND_ROUND9"):
        print(f"{name}: {' '.join(globals()[name])}")
