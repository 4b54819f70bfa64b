"""Project-wide facts (a helper in another module) and the lint cache."""

from __future__ import annotations

import textwrap

import pytest

import torchpact.lint as lint
from torchpact import __version__
from torchpact.config import Config
from torchpact.lint import lint_paths
from torchpact.lint.cache import CACHE_DIR
from torchpact.lint.project import SET_EPOCH, ZERO_GRAD, ProjectFacts, summarize

HELPERS = """
    def train_one_epoch(model, loader, optimizer, epoch):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            step(model, optimizer, x, y)

    def step(model, optimizer, x, y):
        reset(optimizer)
        model(x, y).backward()

    def reset(optimizer):
        optimizer.zero_grad(set_to_none=True)
"""

TRAIN = """
    import torch.utils.data as tud
    from helpers import reset, train_one_epoch

    def main(args, model, dataset, optimizer):
        loader = tud.DataLoader(dataset, batch_size=8, sampler=tud.DistributedSampler(dataset))
        for epoch in range(args.epochs):
            train_one_epoch(model, loader, optimizer, epoch)
        for x, y in loader:
            reset(optimizer)
            model(x, y).backward()
            optimizer.step()
"""


def _write(folder, name: str, text: str) -> str:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_facts_flow_from_callees_to_callers():
    facts = ProjectFacts([summarize(textwrap.dedent(HELPERS))])
    assert facts.has("reset", ZERO_GRAD) and facts.has("step", ZERO_GRAD)
    assert facts.has("train_one_epoch", SET_EPOCH) and facts.has("train_one_epoch", ZERO_GRAD)
    assert not facts.has("reset", SET_EPOCH)


def test_a_helper_in_another_module_silences_the_caller(tmp_path):
    _write(tmp_path, "helpers.py", HELPERS)
    train = _write(tmp_path, "train.py", TRAIN)
    alone = {f.code for f in lint_paths([train], Config(preview=True), jobs=1).findings}
    assert {"TP401", "TP501"} <= alone  # the helper is not linted: nothing is known of it
    together = {f.code for f in lint_paths([str(tmp_path)], Config(preview=True), jobs=1).findings}
    assert not together & {"TP401", "TP501"}


def test_an_unchanged_file_is_not_linted_again(tmp_path, monkeypatch):
    _write(tmp_path, "helpers.py", HELPERS)
    train = _write(tmp_path, "train.py", TRAIN.replace("train_one_epoch(model", "run(model"))
    first = lint_paths([str(tmp_path)], Config(preview=True), jobs=1, cache=True, cache_root=str(tmp_path))
    assert (tmp_path / CACHE_DIR).is_dir()

    def refuse(*a, **k):
        raise AssertionError("linted a file the cache holds")

    monkeypatch.setattr(lint, "lint_file", refuse)
    again = lint_paths([str(tmp_path)], Config(preview=True), jobs=1, cache=True, cache_root=str(tmp_path))
    assert [f.to_dict() for f in again.findings] == [f.to_dict() for f in first.findings]
    assert {f.code for f in first.findings} >= {"TP501"}

    # an edit re-lints that file; a changed configuration re-lints all
    monkeypatch.undo()
    with open(train, "a") as fh:
        fh.write("\n# edited\n")
    edited = lint_paths([str(tmp_path)], Config(preview=True), jobs=1, cache=True, cache_root=str(tmp_path))
    assert [f.code for f in edited.findings] == [f.code for f in first.findings]
    ignoring = lint_paths([str(tmp_path)], Config(ignore=["TP501"], preview=True), jobs=1, cache=True,
                          cache_root=str(tmp_path))
    assert "TP501" not in {f.code for f in ignoring.findings}


def test_no_cache_and_an_unwritable_cache_never_break_a_run(tmp_path):
    _write(tmp_path, "train.py", TRAIN)
    lint_paths([str(tmp_path)], Config(preview=True), jobs=1)
    assert not (tmp_path / CACHE_DIR).exists()  # off unless asked (the CLI asks; --no-cache does not)
    blocked = tmp_path / "ro"
    blocked.write_text("a file where the cache folder would go")
    result = lint_paths([str(tmp_path / "train.py")], Config(preview=True), jobs=1, cache=True, cache_root=str(blocked))
    assert {f.code for f in result.findings} >= {"TP501"}
    corrupt = tmp_path / "c"
    (corrupt / CACHE_DIR).mkdir(parents=True)
    (corrupt / CACHE_DIR / f"lint-{__version__}.json").write_text("{not json")
    again = lint_paths([str(tmp_path / "train.py")], Config(preview=True), jobs=1, cache=True, cache_root=str(corrupt))
    assert {f.code for f in again.findings} == {f.code for f in result.findings}


@pytest.mark.parametrize("flag", [[], ["--no-cache"]])
def test_cli_cache_flag(tmp_path, monkeypatch, flag):
    from torchpact.cli import main

    _write(tmp_path, "train.py", TRAIN)
    monkeypatch.chdir(tmp_path)
    main(["lint", "--preview", "train.py", *flag])
    assert (tmp_path / CACHE_DIR).exists() == (not flag)


def test_codes_read_from_the_rule_files_are_the_registry_s():
    from torchpact.lint.registry import all_rules, declared_codes

    assert declared_codes() == {r.code for r in all_rules()}


DATASETS = """
    import numpy
    import torch

    class Synthetic(torch.utils.data.Dataset):
        def __init__(self, n=32):
            self.x = numpy.linspace(0.0, 1.0, n, dtype=numpy.float32)
            self.y = 3 * self.x + 1

        def __len__(self):
            return len(self.x)

        def __getitem__(self, index):
            return self.x[index], self.y[index]

    class OnDisk(torch.utils.data.Dataset):
        def __init__(self, files):
            self.files = files

        def __getitem__(self, index):
            return torch.load(self.files[index])
"""

FIT = """
    from torch.utils.data import DataLoader
    import datasets

    def fit(model, optimizer, files):
        for loader in (DataLoader(datasets.Synthetic(64), batch_size=8), DataLoader(datasets.OnDisk(files))):
            for x, y in loader:
                model(x, y).backward()
                optimizer.step()
"""


def test_a_dataset_class_of_another_module_serving_held_arrays_is_in_memory(tmp_path):
    _write(tmp_path, "datasets.py", DATASETS)
    fit = _write(tmp_path, "fit.py", FIT)
    config = Config(preview=True, select=["TP920"])
    alone = lint_paths([fit], config, jobs=1).findings
    assert len(alone) == 2 and all(f.evidence.value == "unresolved" for f in alone)  # nothing is known of them
    together = [f for f in lint_paths([str(tmp_path)], config, jobs=1).findings if f.code == "TP920"]
    assert [f.column for f in together] == [alone[1].column]  # OnDisk's loader still fires


GRID = """
import torch

def ndgrid(*tensors):
    try:
        return torch.meshgrid(*tensors, indexing="ij")
    except TypeError:
        return torch.meshgrid(*tensors)

def spread(*tensors):
    return torch.meshgrid(*tensors)[0] / 2
"""
TABLE = """
import torch
from .grid import ndgrid, spread

def log_table(n: int):
    coords = torch.stack(ndgrid(torch.arange(n, dtype=torch.float32), torch.arange(n).float()))
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0)
    halves = spread(torch.arange(n), torch.arange(n))
    return torch.log(1.0 + rel.abs()), torch.log(1 + halves)
"""


def test_a_grid_helper_of_another_module_keeps_whole_numbers_whole(tmp_path):
    assert summarize(GRID).facts == {"ndgrid": ["returns_grid"]}
    _write(tmp_path, "grid.py", GRID)
    table = _write(tmp_path, "table.py", TABLE)
    config = Config(preview=True, select=["TP319"])
    alone = lint_paths([table], config, jobs=1).findings
    assert len(alone) == 2  # what ndgrid returns is not known from this file
    together = [f for f in lint_paths([str(tmp_path)], config, jobs=1).findings if f.code == "TP319"]
    assert [f.column for f in together] == [alone[1].column]  # spread divides: still fractional
