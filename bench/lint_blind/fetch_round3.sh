#!/usr/bin/env bash
# Unpacks blind round 3 of the lint corpus (bench/lint_split.py): eight PyTorch projects from the
# package index that no earlier corpus here holds, at pinned releases, sdists (tests, examples come
# along) where they exist, wheels otherwise. Not to be linted or read before the final measurement.
# usage: bench/lint_blind/fetch_round3.sh [DEST]   (default: .corpus-round3; keep it git-ignored)
set -u
DEST=${1:-.corpus-round3}
mkdir -p "$DEST/dl"
specs="peft==0.21.2 pykeen==1.11.1 pytorch-ignite==0.5.5 sbi==0.27.0 tianshou==2.0.1 timm==1.0.31 torchgeo==0.8.1 trl==1.16.0"
for spec in $specs; do
  name=${spec%%==*}; ver=${spec##*==}
  [[ -d $DEST/$name ]] && continue
  under=$(echo "$name" | tr - _)
  if pip download -q --no-deps --no-binary :all: -d "$DEST/dl" "$spec" >/dev/null 2>&1 \
     && tgz=$(ls "$DEST"/dl/ | grep -iE "^($under|$name)-$ver\.tar\.gz$" | head -1) && [[ -n $tgz ]]; then
    mkdir -p "$DEST/$name" && tar -xzf "$DEST/dl/$tgz" -C "$DEST/$name" --strip-components 1
  elif pip download -q --no-deps --only-binary=:all: -d "$DEST/dl" "$spec" >/dev/null 2>&1; then
    whl=$(ls "$DEST"/dl/ | grep -iE "^$under-$ver-.*\.whl$" | head -1)
    mkdir -p "$DEST/$name" && unzip -q -o "$DEST/dl/$whl" -d "$DEST/$name"
    find "$DEST/$name" -name '*.dist-info' -prune -exec rm -rf {} +
  else
    echo "skip $spec" >&2
  fi
done
echo "$DEST"
