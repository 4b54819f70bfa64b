"""Shared by the lint benchmarks: the pinned corpus from ../shared/corpus/fetch.sh."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def corpus_dir() -> Path:
    """Unpack (first time) and return the corpus folder; TORCHPACT_CORPUS overrides the location."""
    preset = os.environ.get("TORCHPACT_CORPUS")
    if preset:
        return Path(preset)
    fetch = ROOT.parent / "shared" / "corpus" / "fetch.sh"
    if not fetch.exists():
        sys.exit(f"corpus script not found at {fetch}; set TORCHPACT_CORPUS to an unpacked corpus")
    dest = ROOT / ".corpus"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    subprocess.run(["bash", str(fetch), str(dest)], check=True, env=env, stdout=subprocess.DEVNULL)
    return dest


def python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if p.is_file())


def count_lines(files: list[Path]) -> int:
    return sum(p.read_bytes().count(b"\n") for p in files)
