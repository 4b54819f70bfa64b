"""Proofs for compile rules: the pitfall, run with real torch, has the consequence the docs name."""

from __future__ import annotations

import functools
import logging

import pytest
import torch
from torch._dynamo.utils import counters


def _fresh():
    torch._dynamo.reset()
    counters.clear()


def _graphs() -> int:
    return counters["stats"]["unique_graphs"]


def _backend(gm, example_inputs):
    return gm.forward


@pytest.mark.proves("TP801")
def test_a_new_backend_object_per_iteration_recompiles_until_dynamo_gives_up(caplog):
    model, x = torch.nn.Linear(4, 2), torch.randn(3, 4)
    limit = torch._dynamo.config.recompile_limit
    assert limit == 8
    try:
        _fresh()
        with caplog.at_level(logging.WARNING, logger="torch._dynamo"):
            for _ in range(limit + 3):
                out = torch.compile(model, backend=lambda gm, inputs: gm.forward)(x)
        assert _graphs() == limit  # one full compilation per iteration, then no more: eager from here on
        assert torch.allclose(out, model(x))
        log = caplog.text
        assert "BACKEND_MATCH failure: torch.compile detected different backend callables" in log
        assert f"torch._dynamo hit config.recompile_limit ({limit})" in log

        _fresh()
        for _ in range(3):
            torch.compile(model, backend=functools.partial(_backend))(x)
        assert _graphs() == 3  # functools.partial(...) per iteration: also a new backend each time

        # what is *not* flagged: the same backend (function or name) reuses the first compilation
        _fresh()
        for _ in range(3):
            torch.compile(model, backend=_backend)(x)
            torch.compile(model, backend="eager")(x)
        assert _graphs() == 2
    finally:
        _fresh()


@pytest.mark.proves("TP802")
def test_reduce_overhead_and_max_autotune_turn_on_cudagraphs():
    from torch._inductor import config, list_mode_options

    assert list_mode_options("reduce-overhead") == {"triton.cudagraphs": True}
    assert list_mode_options("max-autotune")["triton.cudagraphs"] is True
    assert "triton.cudagraphs" not in list_mode_options("max-autotune-no-cudagraphs")
    assert list_mode_options("default") == {}
    assert config.triton.cudagraphs is False  # the default mode does not record CUDA graphs
    # one graph per distinct input size is recorded, warned about past this many sizes
    assert config.triton.cudagraph_dynamic_shape_warn_limit == 8
    assert config.triton.cudagraph_skip_dynamic_graphs is False
