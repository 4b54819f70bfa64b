"""bench/corpus.py: the lint benches' corpus is fetched into the checkout when first needed, or taken
from TORCHPACT_CORPUS; a project that cannot be had is left out with its reason, and a bench with
none of its projects gets NoCorpus (it then skips in one line). No test downloads anything."""

from __future__ import annotations

import io
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
import corpus  # noqa: E402


def test_a_preset_corpus_gives_the_projects_it_holds_and_names_the_others(tmp_path, monkeypatch, capsys):
    (tmp_path / "skorch").mkdir()
    monkeypatch.setenv("TORCHPACT_CORPUS", str(tmp_path))
    folder, have = corpus.corpus_dir(["skorch", "fastai", "no-such-project"])
    assert folder == tmp_path and have == ["skorch"]
    err = capsys.readouterr().err
    assert "fastai is not in TORCHPACT_CORPUS" in err and "no-such-project is not a project of the corpus" in err


def test_no_project_at_all_is_no_corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHPACT_CORPUS", str(tmp_path))
    with pytest.raises(corpus.NoCorpus, match="fastai is not in TORCHPACT_CORPUS"):
        corpus.corpus_dir(["fastai"])


def test_an_sdist_loses_its_top_folder_and_a_wheel_its_dist_info(tmp_path):
    sdist = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tf:
        for name in ("pkg-1.0/setup.py", "pkg-1.0/pkg/__init__.py"):
            info = tarfile.TarInfo(name)
            info.size = 1
            tf.addfile(info, io.BytesIO(b"\n"))
    corpus._unpack(sdist, tmp_path / "from_sdist")
    assert sorted(p.relative_to(tmp_path / "from_sdist").as_posix() for p in (tmp_path / "from_sdist").rglob("*.py")) \
        == ["pkg/__init__.py", "setup.py"]
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/__init__.py", "\n")
        zf.writestr("pkg-1.0.dist-info/METADATA", "Name: pkg\n")
    corpus._unpack(wheel, tmp_path / "from_wheel")
    assert [p.name for p in (tmp_path / "from_wheel").iterdir()] == ["pkg"]
