#!/usr/bin/env bash
# Unpacks blind round 8 of the lint corpus (bench/lint_split.py): eight PyTorch projects from the
# package index that no earlier corpus here holds, at pinned releases, sdists where the index has one
# that unpack_releases.sh can take (tests, examples, configs and tools come along), wheels for torchgan,
# tts and yolov5. Not to be linted or read before the final measurement.
# usage: bench/lint_blind/fetch_round8.sh [DEST]   (default: .corpus-round8; keep it git-ignored)
set -u
exec "$(dirname "$0")/unpack_releases.sh" "${1:-.corpus-round8}" dive-into-graphs==1.1.0 neuraloperator==2.0.0 pypots==1.5 recbole==1.2.1 rl-games==1.6.5 torchgan==0.1.0 tts==0.22.0 yolov5==7.0.14
