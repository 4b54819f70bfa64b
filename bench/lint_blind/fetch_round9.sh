#!/usr/bin/env bash
# Unpacks blind round 9 of the lint corpus (bench/lint_split.py): eight PyTorch projects from the
# package index that no earlier corpus here holds, at pinned releases, sdists where the index has one
# that unpack_releases.sh can take (tests, examples, configs and tools come along), wheels otherwise.
# Not to be linted or read before the final measurement.
# usage: bench/lint_blind/fetch_round9.sh [DEST]   (default: .corpus-round9; keep it git-ignored)
set -u
exec "$(dirname "$0")/unpack_releases.sh" "${1:-.corpus-round9}" deepfilternet==0.5.6 elegantrl==0.3.6 k-diffusion==0.1.1.post1 nnunetv2==2.8.1 python-doctr==1.1.0 simpletransformers==0.70.8 solo-learn==1.0.2 torch-points3d==1.3.0
