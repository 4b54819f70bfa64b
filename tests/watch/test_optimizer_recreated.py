"""Runtime TP460: an optimizer re-built over parameters already trained."""

from __future__ import annotations

import torch
import torch.nn as nn

from tests.watch.util import codes, watched


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def _epoch(model, opt, steps=3):
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(8, 8)).pow(2).mean().backward()
        opt.step()


def test_optimizer_built_inside_the_epoch_loop_loses_its_state():
    model = _model()
    states = []

    def run():
        for _ in range(3):
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)  # the bug: inside the loop
            _epoch(model, opt)
            states.append(opt.state[model[0].weight]["step"].item())
    [f] = [f for f in watched(run, ["optimizer_recreated"]) if f.code == "TP460"]
    assert states == [3, 3, 3]  # the consequence: Adam restarts its step count every epoch
    assert "same settings" in f.message and f.path.endswith("test_optimizer_recreated.py")


def test_stages_fresh_models_gans_and_stateless_sgd_are_silent():
    model = _model()

    def stages():
        model[0].requires_grad_(False)
        _epoch(model, torch.optim.Adam(model[2].parameters(), lr=1e-3))
        model[0].requires_grad_(True)
        _epoch(model, torch.optim.Adam(model.parameters(), lr=1e-4))  # stage 2: new settings, once
    assert codes(watched(stages, ["optimizer_recreated"])) == []

    def fresh_models():
        for _ in range(3):
            m = _model()
            _epoch(m, torch.optim.Adam(m.parameters(), lr=1e-3))
    assert codes(watched(fresh_models, ["optimizer_recreated"])) == []

    def gan():
        g, d = _model(), _model()
        og, od = torch.optim.Adam(g.parameters()), torch.optim.Adam(d.parameters())
        for _ in range(4):
            _epoch(d, od, 1)
            _epoch(g, og, 1)
    assert codes(watched(gan, ["optimizer_recreated"])) == []

    def plain_sgd():
        for _ in range(3):
            _epoch(model, torch.optim.SGD(model.parameters(), lr=0.1))  # no state to lose
    assert codes(watched(plain_sgd, ["optimizer_recreated"])) == []


# ------------------------------------------- a fresh optimizer per task (continual learning) vs per epoch
from torch.utils.data import ConcatDataset, DataLoader, Subset, TensorDataset  # noqa: E402


def _tasks(n=3, size=24):
    torch.manual_seed(1)
    return [TensorDataset(torch.randn(size, 8), torch.randn(size, 1)) for _ in range(n)]


def _fit(model, opt, loader, epochs=2):
    for _ in range(epochs):
        for xb, yb in loader:
            opt.zero_grad()
            (model(xb) - yb).pow(2).mean().backward()
            opt.step()


def _evaluate(model, datasets):
    with torch.no_grad():
        for data in datasets:
            for xb, _ in DataLoader(data, batch_size=8):
                model(xb)


def test_a_fresh_optimizer_for_each_task_of_a_continual_learning_script_is_silent():
    def per_task_adam():  # each task its own dataset; the tasks so far evaluated in between
        model, tasks = _model(), _tasks()
        for t, data in enumerate(tasks):
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            _fit(model, opt, DataLoader(data, batch_size=8, shuffle=True))
            _evaluate(model, tasks[:t + 1])

    def class_incremental_sgd():  # one base dataset, a Subset per task, momentum as a positional argument
        model = _model()
        base = TensorDataset(torch.randn(60, 8), torch.randn(60, 1))
        for first in range(0, 60, 20):
            _fit(model, torch.optim.SGD(model.parameters(), 0.01, 0.9),
                 DataLoader(Subset(base, range(first, first + 20)), batch_size=5), epochs=1)

    def helper_with_replay():  # built inside a helper; each task's loader mixes the task with a memory
        model, tasks = _model(), _tasks()
        memory: list = []

        def learn(data):
            opt = torch.optim.AdamW(params=model.parameters(), lr=1e-3)
            _fit(model, opt, DataLoader(ConcatDataset([data, *memory]), batch_size=8, shuffle=True))
        for data in tasks:
            learn(data)
            memory.append(Subset(data, range(4)))

    for script in (per_task_adam, class_incremental_sgd, helper_with_replay):
        assert codes(watched(script, ["optimizer_recreated"])) == [], script.__name__


def test_a_fresh_optimizer_over_the_same_data_is_still_reported():
    def inside_the_epoch_loop():  # one loader, an optimizer built every epoch
        model, [data] = _model(), _tasks(1)
        loader = DataLoader(data, batch_size=8, shuffle=True)
        for _ in range(3):
            _fit(model, torch.optim.Adam(model.parameters(), lr=1e-3), loader, epochs=1)

    def new_loader_same_dataset():  # a new DataLoader each epoch over the same dataset, validated in between
        model, [data, held_out] = _model(), _tasks(2)
        for _ in range(3):
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            _fit(model, opt, DataLoader(data, batch_size=6, shuffle=True), epochs=1)
            _evaluate(model, [held_out])

    def same_task_again():  # "tasks" that are all the same dataset: the same training restarted
        model, [data] = _model(), _tasks(1)
        for _ in range(2):
            _fit(model, torch.optim.Adam(model.parameters(), lr=1e-3), DataLoader(data, batch_size=8))

    for script in (inside_the_epoch_loop, new_loader_same_dataset, same_task_again):
        assert codes(watched(script, ["optimizer_recreated"])) == ["TP460"], script.__name__
