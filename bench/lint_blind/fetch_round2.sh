#!/usr/bin/env bash
# Unpacks blind round 2 of the lint corpus (bench/lint_split.py): eight PyTorch projects from the
# package index that no earlier corpus here holds, at pinned releases, sdists (tests, examples come
# along) where they exist, wheels otherwise. Not to be linted or read before the final measurement.
# usage: bench/lint_blind/fetch_round2.sh [DEST]   (default: .corpus-round2; keep it git-ignored)
set -u
exec "$(dirname "$0")/unpack_releases.sh" "${1:-.corpus-round2}" accelerate==1.16.0 captum==0.9.0 diffusers==0.42.1 kornia==0.9.0 monai==1.6.1 pytorch-metric-learning==2.9.0 speechbrain==1.1.2 torchmetrics==1.9.0
