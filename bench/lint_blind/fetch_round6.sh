#!/usr/bin/env bash
# Unpacks blind round 6 of the lint corpus (bench/lint_split.py): eight PyTorch projects from the
# package index that no earlier corpus here holds, at pinned releases, sdists where the index has one
# (tests, examples, configs and tools come along). Not to be linted or read before the final measurement.
# usage: bench/lint_blind/fetch_round6.sh [DEST]   (default: .corpus-round6; keep it git-ignored)
set -u
exec "$(dirname "$0")/unpack_releases.sh" "${1:-.corpus-round6}" mmpretrain==1.2.0 pythae==0.1.2 pytorch-optimizer==4.1.0 pytorch-tabnet==4.1.0 pytorch-widedeep==1.7.0 torchcde==0.2.5 vector-quantize-pytorch==1.32.0 x-transformers==2.31.10
