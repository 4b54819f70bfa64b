"""One eager timing for both commands: export-check and compile-check call the same helper, first, on
the same inputs, with the same thread count, grad mode and model mode (logic, never timing)."""

from __future__ import annotations

import os

import pytest
import torch

from tests.audit.util import HERE
from torchpact.audit import timing as T
from torchpact.audit.compile import compile_check
from torchpact.audit.export import export_check
from torchpact.audit.target import load_target

os.environ.setdefault("HF_HUB_OFFLINE", "1")
_EAGER_LATENCY = T.eager_latency


def _recorded(monkeypatch, run):
    """Every forward call inside ``timing.eager_latency`` while ``run(progress)`` runs: grad mode, model
    mode, thread count and the inputs; and the progress notes emitted before the helper was called."""
    calls, notes = [], []

    def spy(model, variants, dims, device="cpu", budget_s=T.BUDGET_S):
        def hook(module, args, kwargs):
            given = [x for x in list(args) + list(kwargs.values()) if isinstance(x, torch.Tensor)]
            calls.append({"grad": torch.is_grad_enabled(), "training": module.training,
                          "threads": torch.get_num_threads(), "budget_s": budget_s, "notes": tuple(notes),
                          "inputs": tuple((tuple(t.shape), tuple(t.flatten().tolist())) for t in given)})

        handle = model.register_forward_pre_hook(hook, with_kwargs=True)
        try:
            return _EAGER_LATENCY(model, variants, dims, device, budget_s)
        finally:
            handle.remove()

    monkeypatch.setattr(T, "eager_latency", spy)
    report = run(notes.append)
    return report, calls


@pytest.mark.parametrize("spec", [f"{HERE / 'arch_targets.py'}:bert", f"{HERE / 'targets.py'}:training_dropout"])
def test_both_commands_time_eager_with_one_helper_in_the_same_conditions(monkeypatch, spec):
    if spec.endswith(":bert"):
        pytest.importorskip("transformers")
    exported, by_export = _recorded(monkeypatch, lambda note: export_check(
        load_target(spec), paths=("trace",), strict_too=False, threads=1, budget_s=0.02, progress=note))
    compiled, by_compile = _recorded(monkeypatch, lambda note: compile_check(
        load_target(spec), modes=(), threads=1, budget_s=0.02, progress=note))
    assert by_export and by_compile
    for calls in (by_export, by_compile):
        # first thing: no path built and no dynamo work before eager is timed
        assert {c["notes"] for c in calls} == {("eager latency",)}
        assert {(c["grad"], c["training"], c["threads"], c["budget_s"]) for c in calls} == {(False, False, 1, 0.02)}
    # the same inputs, by value: the example and the smallest and largest batch
    assert {c["inputs"] for c in by_export} == {c["inputs"] for c in by_compile}
    assert len({c["inputs"] for c in by_export}) == 3
    # and the figure export-check shows on every path is that clean measurement
    clean = exported.summary()["eager_latency_ms"]
    assert set(clean) == set(compiled.summary()["eager_latency_ms"]) and len(clean) == 3 and "batch=1" in clean
    lat = exported.paths["trace"].latency_ms
    assert lat["eager"] == clean["example"]["p50"] and lat["eager_p99"] == clean["example"]["p99"]


def test_eval_mode_restores_each_modules_own_mode():
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5))
    net.train()
    net[0].eval()
    with T.eval_mode(net):
        assert not any(m.training for m in net.modules())
    assert net.training and not net[0].training and net[1].training


def test_eager_drifting_from_its_clean_figure_makes_the_comparison_unstable():
    assert T.drift({"p50": 1.0}, {"p50": 1.2}) is None
    why = T.drift({"p50": 1.0}, {"p50": 1.6})
    assert why.startswith("eager ran at 1.6 ms p50 next to the artifact vs 1 ms first")
    assert T.drift({"p50": None}, {"p50": 1.6}) is None
