#!/usr/bin/env bash
# Unpacks blind round 5 of the lint corpus (bench/lint_split.py): eight PyTorch projects from the
# package index that no earlier corpus here holds, at pinned releases, sdists (tests, examples come
# along). Not to be linted or read before the final measurement.
# usage: bench/lint_blind/fetch_round5.sh [DEST]   (default: .corpus-round5; keep it git-ignored)
set -u
exec "$(dirname "$0")/unpack_releases.sh" "${1:-.corpus-round5}" d3rlpy==2.8.1 denoising-diffusion-pytorch==2.3.4 lightning-bolts==0.7.0 openunmix==1.3.0 segmentation-models-pytorch==0.6.0 torch-audiomentations==0.12.0 torchdiffeq==0.2.5 torchsde==0.2.6
