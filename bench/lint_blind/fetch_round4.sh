#!/usr/bin/env bash
# Unpacks blind round 4 of the lint corpus (bench/lint_split.py): eight PyTorch projects from the
# package index that no earlier corpus here holds, at pinned releases, sdists (tests, examples come
# along) where they exist, wheels otherwise. Not to be linted or read before the final measurement.
# usage: bench/lint_blind/fetch_round4.sh [DEST]   (default: .corpus-round4; keep it git-ignored)
set -u
exec "$(dirname "$0")/unpack_releases.sh" "${1:-.corpus-round4}" asteroid==0.7.0 avalanche-lib==0.6.0 braindecode==1.8.1 e3nn==0.6.0 neuralforecast==3.3.0 skrl==2.1.1 torchtune==0.6.1 ultralytics==8.4.190
