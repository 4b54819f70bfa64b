"""Where the pytorch/examples sources come from: the pinned commit, from a mirror named by
``TORCHPACT_EXAMPLES_MIRROR`` (a git repository or checkout holding the commit, a plain folder of its
files, or a tarball of them), else from a cache of an earlier download, else downloaded once from
GitHub (the commit's archive, or ``git fetch`` of that one commit). Nothing of upstream is kept in
this repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from pathlib import Path

COMMIT = "77f55b912142e11fcfdf5b530231fb9c52f181e8"   # "silence destroy_proces_group() warning (#1387)", 2025-08-25
ARCHIVE_URL = f"https://codeload.github.com/pytorch/examples/tar.gz/{COMMIT}"
GIT_URL = "https://github.com/pytorch/examples.git"
MIRROR_ENV = "TORCHPACT_EXAMPLES_MIRROR"
MARKER = Path("regression") / "main.py"    # a file every checkout of the commit has


class NoSource(Exception):
    """The sources could not be had; the message says why, in one line."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torchpact" / f"pytorch-examples-{COMMIT[:12]}"


def _is_git(path: Path) -> bool:
    return (path / ".git").exists() or ((path / "objects").is_dir() and (path / "HEAD").is_file())


def _export_commit(git_dir: Path, dest: Path) -> None:
    """Writes the pinned commit's files from a git repository into ``dest``. Blobs the repository lacks
    (a partial mirror leaves out large data files) are left out; the examples' own data is synthetic."""
    git = ["git", "-C", str(git_dir)]
    if subprocess.run([*git, "cat-file", "-e", f"{COMMIT}^{{commit}}"], capture_output=True, check=False).returncode:
        raise NoSource(f"{git_dir} does not hold commit {COMMIT[:12]}")
    listing = subprocess.run([*git, "ls-tree", "-r", "-z", COMMIT], capture_output=True, check=True).stdout
    files = []
    for entry in filter(None, listing.split(b"\0")):
        meta, path = entry.split(b"\t", 1)
        mode, kind, sha = meta.split()
        if kind == b"blob" and mode in (b"100644", b"100755"):
            files.append((sha, path.decode()))
    batch = subprocess.run([*git, "cat-file", "--batch"], input=b"".join(sha + b"\n" for sha, _ in files),
                           capture_output=True, check=True).stdout
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        pos = 0
        for _, path in files:
            header_end = batch.index(b"\n", pos)
            header = batch[pos:header_end].split()
            pos = header_end + 1
            if header[-1] == b"missing":
                continue
            size = int(header[2])
            target = Path(tmp) / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(batch[pos:pos + size])
            pos += size + 1
        if not (Path(tmp) / MARKER).is_file():
            raise NoSource(f"{git_dir} lacks {MARKER} at commit {COMMIT[:12]}")
        Path(tmp).rename(dest)
        Path(tmp).mkdir()  # for TemporaryDirectory's clean-up


def _extract(archive: tarfile.TarFile, dest: Path) -> None:
    """Extracts into ``dest``, dropping a single top folder (GitHub archives have ``examples-<sha>/``)."""
    with archive, tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        if hasattr(tarfile, "data_filter"):
            archive.extractall(tmp, filter="data")
        else:  # Python without extraction filters: refuse paths that leave the folder
            members = archive.getmembers()
            if any(m.name.startswith(("/", "..")) or "/../" in m.name or m.issym() or m.islnk() for m in members):
                raise NoSource("the archive holds paths outside its folder or links")
            archive.extractall(tmp, members)
        entries = list(Path(tmp).iterdir())
        top = entries[0] if len(entries) == 1 and entries[0].is_dir() else Path(tmp)
        if not (top / MARKER).is_file():
            raise NoSource(f"the archive has no {MARKER}: not pytorch/examples")
        top.rename(dest) if top != Path(tmp) else shutil.copytree(tmp, dest)


def _from_mirror(mirror: str, dest: Path) -> Path:
    path = Path(mirror).expanduser()
    if path.is_dir() and _is_git(path):
        _export_commit(path, dest)
        return dest
    if path.is_dir():
        if not (path / MARKER).is_file():
            raise NoSource(f"{MIRROR_ENV}={mirror} has no {MARKER}")
        return path  # a plain copy of the files: trusted to be the pinned commit
    if path.is_file() and tarfile.is_tarfile(path):
        _extract(tarfile.open(path), dest)
        return dest
    raise NoSource(f"{MIRROR_ENV}={mirror} is not a git repository, a folder or a tarball")


def _download(dest: Path) -> None:
    try:
        with urllib.request.urlopen(ARCHIVE_URL, timeout=60) as response, tempfile.TemporaryFile() as fh:
            shutil.copyfileobj(response, fh)
            fh.seek(0)
            _extract(tarfile.open(fileobj=fh), dest)
        return
    except (OSError, tarfile.TarError) as exc:
        archive_error = exc
    if shutil.which("git") is None:
        raise NoSource(f"download failed ({archive_error}) and git is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        steps = (["git", "init", "-q", tmp], ["git", "-C", tmp, "fetch", "-q", "--depth", "1", GIT_URL, COMMIT])
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, timeout=600, check=False)
            if done.returncode:
                reason = (done.stderr.strip().splitlines() or ["failed"])[-1]
                raise NoSource(f"download failed ({archive_error}); git fetch failed ({reason})")
        _export_commit(Path(tmp), dest)


def locate(download: bool = True) -> Path:
    """The folder holding the pinned commit's files; raises NoSource with the reason when there is none."""
    dest = cache_dir()
    mirror = os.environ.get(MIRROR_ENV)
    if (dest / MARKER).is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    if mirror:
        return _from_mirror(mirror, dest)
    if not download:
        raise NoSource(f"no {MIRROR_ENV} and no cached copy in {dest}")
    _download(dest)
    return dest
