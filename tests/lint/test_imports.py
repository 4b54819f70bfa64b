"""Imports alone: aliases, what names and calls resolve to, canonical public paths."""

from __future__ import annotations

from torchpact.lint.analysis.imports import Imports, canonical
from tests.lint._tree import call_of, indexed

CODE = """
import torch.nn as nn
import numpy
from torch.utils.data.dataloader import DataLoader as DL
from . import sibling
from torch.optim import *

def f():
    import torch.distributed
    nn.Linear(2, 2)
    DL([])
    unknown.thing()
    sibling.go()
"""


def test_aliases_come_from_every_import_at_any_depth_but_relative_and_star_ones():
    names = Imports(indexed(CODE))
    assert names.aliases == {"nn": "torch.nn", "numpy": "numpy", "DL": "torch.utils.data.dataloader.DataLoader",
                             "torch": "torch"}
    assert names.imports("torch") and names.imports("torch.nn") and names.imports("numpy")
    assert not names.imports("torchvision") and not names.imports("tor")


def test_calls_resolve_to_public_paths_and_unknown_roots_to_none():
    nav = indexed(CODE)
    names = Imports(nav)
    assert names.call_name(call_of(nav, "Linear")) == "torch.nn.Linear"
    assert names.call_name(call_of(nav, "DL")) == "torch.utils.data.DataLoader"
    assert names.call_name(call_of(nav, "thing")) is None and names.call_name(call_of(nav, "go")) is None
    assert names.is_call_to(call_of(nav, "Linear"), "torch.nn.Conv2d", "torch.nn.Linear")
    assert names.call_name(nav.tree) is None  # not a call


def test_canonical_maps_internal_module_paths():
    assert canonical("torch.nn.modules.linear.Linear") == "torch.nn.Linear"
    assert canonical("torch.nn.modules.loss.MSELoss") == "torch.nn.MSELoss"
    assert canonical("torch.nn.modules.utils") == "torch.nn.modules.utils"
    assert canonical("torch.functional.norm") == "torch.norm"
