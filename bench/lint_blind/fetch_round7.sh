#!/usr/bin/env bash
# Unpacks blind round 7 of the lint corpus (bench/lint_split.py): eight PyTorch projects from the
# package index that no earlier corpus here holds, at pinned releases, sdists where the index has one
# (tests, examples, configs and tools come along). Not to be linted or read before the final measurement.
# usage: bench/lint_blind/fetch_round7.sh [DEST]   (default: .corpus-round7; keep it git-ignored)
set -u
exec "$(dirname "$0")/unpack_releases.sh" "${1:-.corpus-round7}" allennlp==2.10.1 demucs==4.1.0 normflows==1.7.3 opacus==1.6.0 pfrl==0.4.0 pytorch-tabular==1.2.0 pytorchvideo==0.1.5 torch-geometric-temporal==0.56.2
