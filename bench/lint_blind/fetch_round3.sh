#!/usr/bin/env bash
# Unpacks blind round 3 of the lint corpus (bench/lint_split.py): eight PyTorch projects from the
# package index that no earlier corpus here holds, at pinned releases, sdists (tests, examples come
# along) where they exist, wheels otherwise. Not to be linted or read before the final measurement.
# usage: bench/lint_blind/fetch_round3.sh [DEST]   (default: .corpus-round3; keep it git-ignored)
set -u
exec "$(dirname "$0")/unpack_releases.sh" "${1:-.corpus-round3}" peft==0.21.2 pykeen==1.11.1 pytorch-ignite==0.5.5 sbi==0.27.0 tianshou==2.0.1 timm==1.0.31 torchgeo==0.8.1 trl==1.16.0
