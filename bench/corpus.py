"""The lint benchmarks' corpus: pinned releases of real PyTorch-using projects, fetched with pip when a
bench first needs them, into ``.corpus/`` of the checkout (git-ignored).

Sources: the sdist where there is one (tests, examples and notebooks come along), else the wheel.
``TORCHPACT_CORPUS`` names a folder that already holds the projects (one subfolder each) instead.
A bench asks only for the projects it measures (``lint_split.py`` says which are TUNING and which
are blind); a project that cannot be fetched is left out with its reason, and a bench with none of
its projects skips with a one-line reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

VERSIONS = {
    "transformers": "5.23.0", "pytorch-lightning": "2.6.6", "torch-geometric": "2.8.1",
    "sentence-transformers": "6.2.0", "open-clip-torch": "3.3.0", "torchrl": "0.14.1", "mosaicml": "0.32.1",
    "fastai": "2.8.12", "stable-baselines3": "2.9.2", "skorch": "1.4.0", "lightly": "1.6.0", "mmengine": "0.10.7",
    "nemo-toolkit": "3.0.0", "pyro-ppl": "1.9.2", "gpytorch": "1.15.2", "espnet": "202511", "flair": "0.15.1",
    "deepspeed": "0.19.8", "torchao": "0.18.0", "pyannote-audio": "4.0.7", "botorch": "0.18.1",
    "colossalai": "0.5.0", "fairseq2": "0.8.1", "mmdet": "3.3.0", "pytorch-forecasting": "1.8.0",
    "darts": "0.48.1", "tsai": "1.0.1",
}
WHEEL_ONLY = {"transformers", "pytorch-lightning"}   # their sdists hold no more than the wheels, slower to unpack


class NoCorpus(Exception):
    """None of the projects a bench needs could be had; the message says why, in one line."""


def _pip_download(spec: str, dest: Path, binary: bool) -> Path | None:
    kind = ["--only-binary=:all:"] if binary else ["--no-binary", ":all:"]
    before = set(dest.iterdir())
    done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *kind, "-d", str(dest), spec],
                          capture_output=True, text=True, timeout=1800, check=False)
    new = sorted(set(dest.iterdir()) - before)
    return new[0] if done.returncode == 0 and new else None


def _unpack(archive: Path, dest: Path) -> None:
    """Unpacks an sdist (dropping its top folder) or a wheel (dropping its .dist-info) into ``dest``."""
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        if archive.suffix in (".whl", ".zip"):
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(tmp)
        else:
            with tarfile.open(archive) as tf:
                tf.extractall(tmp, filter="data") if hasattr(tarfile, "data_filter") else tf.extractall(tmp)
        entries = list(Path(tmp).iterdir())
        top = entries[0] if archive.suffix != ".whl" and len(entries) == 1 and entries[0].is_dir() else Path(tmp)
        for info in top.glob("*.dist-info"):
            shutil.rmtree(info)
        shutil.copytree(top, dest)


def fetch(name: str, folder: Path) -> str:
    """Downloads and unpacks one pinned project into ``folder/name``; returns "" or why it could not."""
    spec = f"{name}=={VERSIONS[name]}"
    downloads = folder / "dl"
    downloads.mkdir(parents=True, exist_ok=True)
    archive = None if name in WHEEL_ONLY else _pip_download(spec, downloads, binary=False)
    archive = archive or _pip_download(spec, downloads, binary=True)
    if archive is None:
        return f"pip could not download {spec}"
    _unpack(archive, folder / name)
    return ""


def corpus_dir(projects: tuple[str, ...] | list[str]) -> tuple[Path, list[str]]:
    """(the corpus folder, the projects of ``projects`` it holds), fetching the missing ones; prints
    one line per project left out. Raises NoCorpus when none is there."""
    preset = os.environ.get("TORCHPACT_CORPUS")
    folder = Path(preset) if preset else ROOT / ".corpus"
    have, reasons = [], []
    for name in projects:
        if name not in VERSIONS:
            reasons.append(f"{name} is not a project of the corpus")
            continue
        if not (folder / name).is_dir() and not preset:
            print(f"corpus: fetching {name}=={VERSIONS[name]} into {folder}", file=sys.stderr, flush=True)
            why = fetch(name, folder)
            if why:
                reasons.append(why)
        if (folder / name).is_dir():
            have.append(name)
        elif preset:
            reasons.append(f"{name} is not in TORCHPACT_CORPUS={preset}")
    for why in reasons:
        print(f"corpus: left out: {why}", file=sys.stderr)
    if not have:
        raise NoCorpus(reasons[0] if reasons else "no project asked for")
    return folder, have


def python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if p.is_file())


def count_lines(files: list[Path]) -> int:
    return sum(p.read_bytes().count(b"\n") for p in files)
