"""The files the upstream examples would download or read, written here as synthetic stand-ins in the
formats the scripts parse: Cora's ``cora.content`` / ``cora.cites`` (in ``cora.tgz``), WikiText-2's
``train.txt`` / ``valid.txt`` / ``test.txt``, the sine waves ``traindata.pt`` of
time_sequence_prediction, and BSDS300's image folders of super_resolution (as PNG).
"""

from __future__ import annotations

import importlib.util
import io
import math
import tarfile
from pathlib import Path

import numpy as np
import torch

STANDINS = Path(__file__).resolve().parent / "standins"


def cora_archive(folder: Path, nodes: int = 1800, words: int = 300, classes: int = 7, seed: int = 0) -> Path:
    """``folder/cora.tgz`` holding ``cora/cora.content`` and ``cora/cora.cites``: papers whose binary
    word features depend on their class, citations mostly between papers of one class."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, nodes)
    word_odds = rng.uniform(0.01, 0.12, (classes, words))
    present = rng.random((nodes, words)) < word_odds[labels]
    paper_ids = rng.choice(np.arange(1, 10 * nodes), size=nodes, replace=False)
    content = "".join(f"{paper_ids[i]}\t" + "\t".join("1" if w else "0" for w in present[i]) + f"\ttopic_{labels[i]}\n"
                      for i in range(nodes))
    cites = []
    by_class = [np.flatnonzero(labels == c) for c in range(classes)]
    for citing in rng.integers(0, nodes, 3 * nodes):
        pool = by_class[labels[citing]] if rng.random() < 0.8 else np.arange(nodes)
        cited = pool[rng.integers(0, len(pool))]
        if cited != citing:
            cites.append(f"{paper_ids[cited]}\t{paper_ids[citing]}\n")
    path = folder / "cora.tgz"
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tgz:
        for name, text in (("cora/cora.content", content), ("cora/cora.cites", "".join(cites))):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tgz.addfile(info, io.BytesIO(data))
    return path


def wikitext(folder: Path, vocab: int = 400, counts=(8000, 1500, 1500), seed: int = 0) -> Path:
    """WikiText-2's three files, one sentence a line, from a random first-order Markov chain."""
    rng = np.random.default_rng(seed)
    table = rng.dirichlet(np.full(vocab, 0.05), size=vocab)
    folder.mkdir(parents=True, exist_ok=True)
    word = 0
    for name, count in zip(("train", "valid", "test"), counts, strict=True):
        lines, line = [], []
        for _ in range(count):
            word = rng.choice(vocab, p=table[word])
            line.append(f"w{word}")
            if len(line) == 12:
                lines.append(" " + " ".join(line) + " ")
                line = []
        (folder / f"{name}.txt").write_text("\n".join(lines) + "\n")
    return folder


def sine_waves(path: Path, waves: int = 100, length: int = 100, period: float = 20.0, seed: int = 0) -> Path:
    """``traindata.pt``: a float64 NumPy array (waves, length) of sines with random shifts, saved with
    torch.save as time_sequence_prediction expects."""
    rng = np.random.default_rng(seed)
    shifts = rng.integers(-4 * int(period), 4 * int(period), (waves, 1))
    torch.save(np.sin((np.arange(length) + shifts) / period).astype("float64"), path)
    return path


def _standin_image_class():
    """The stand-in PIL's Image (it writes PNG without Pillow), loaded without putting the stand-ins on sys.path."""
    spec = importlib.util.spec_from_file_location("_standin_pil_image", STANDINS / "PIL" / "Image.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Image


def image_folders(root: Path, train: int = 16, test: int = 4, side: int = 264, seed: int = 0) -> Path:
    """``root/BSDS300/images/{train,test}/*.png``: smooth random RGB pictures."""
    Image = _standin_image_class()
    gen = torch.Generator().manual_seed(seed)
    grid = torch.linspace(0, 1, side)
    yy, xx = torch.meshgrid(grid, grid, indexing="ij")
    for split, count in (("train", train), ("test", test)):
        folder = root / "BSDS300" / "images" / split
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            picture = torch.zeros(side, side, 3)
            for _ in range(5):
                fy, fx, phase = (torch.rand(3, generator=gen) * torch.tensor([10.0, 10.0, 2 * math.pi])).tolist()
                colour = torch.rand(3, generator=gen)
                picture += torch.sin(2 * math.pi * (fy * yy + fx * xx) + phase)[..., None] * colour
            picture = (picture - picture.min()) / (picture.max() - picture.min()) * 255
            Image(picture.round(), "RGB").save(str(folder / f"{split}_{i:03d}.png"))
    return root
