#!/usr/bin/env bash
# Unpacks pinned releases from the package index into DEST/<name>: the sdist (tests and examples come
# along) where there is one, the wheel otherwise. Used by the fetch_round*.sh scripts of the blind rounds.
# usage: bench/lint_blind/unpack_releases.sh DEST NAME==VERSION...
set -u
DEST=$1; shift
mkdir -p "$DEST/dl"
for spec in "$@"; do
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
