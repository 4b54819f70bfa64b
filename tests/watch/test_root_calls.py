"""Unsampled steps without torch's global module hooks: the models' outermost calls through their class.

Real models, real training loops: a step that no watcher needs the inner calls of leaves every
module on torch's fast path, the watchers that need the outermost calls still get them, and a model
whose class carries the session's ``__call__`` can be deep-copied, pickled, scripted and compiled.
"""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.modules.module as module_hooks

from tests.watch.test_session import Recorder
from tests.watch.util import codes
from torchpact.watch import Sampler, watch

ONLY_STEP_0 = Sampler(first=1, every=1000, calls=None)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 1))

    def forward(self, x):
        return self.body(x)


def _global_hooks() -> int:
    return len(module_hooks._global_forward_pre_hooks) + len(module_hooks._global_forward_hooks)


def _step(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    opt.zero_grad()
    model(torch.randn(6, 4)).pow(2).mean().backward()
    opt.step()


def test_unsampled_steps_take_the_global_hooks_off_and_see_outermost_calls_through_the_class():
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    before = _global_hooks()
    roots, nothing = Recorder("roots"), Recorder("none")
    with watch([roots, nothing], sampler=Sampler(first=1, every=3, calls=None)) as session:
        _step(model, opt)                    # step 0, sampled: every call, through the global hooks
        assert _global_hooks() == before and "__call__" in Net.__dict__ and not session.exact_stack
        _step(model, opt)                    # step 1
        _step(model, opt)                    # step 2; step 3 is sampled
        # sampled: the global hooks, and the class's __call__ that takes grad-disabled calls off them
        assert _global_hooks() == before + 2 and "__call__" in Net.__dict__ and session.exact_stack
        _step(model, opt)
    assert _global_hooks() == before and "__call__" not in Net.__dict__
    per_step = lambda rec, step: [d for s, d in rec.pre if s == step]  # noqa: E731
    assert per_step(roots, 0) == per_step(roots, 3) == [1, 2, 3, 3, 3, 3]
    assert per_step(roots, 1) == per_step(roots, 2) == [1]   # the outermost call, at depth 1
    assert [d for s, d in roots.post if s in (1, 2)] == [0, 0]
    assert per_step(nothing, 1) == per_step(nothing, 2) == []
    assert "__call__" not in nn.Sequential.__dict__ and "__call__" not in nn.Linear.__dict__  # never the root


class Seen(Recorder):
    """Records each call's module class, whether torch's global hooks were on during it and the session's
    ``sampled`` then."""

    def __init__(self, unsampled_calls: str) -> None:
        super().__init__(unsampled_calls)
        self.calls: list[tuple[int, str, bool, bool]] = []

    def on_forward_pre(self, module, args) -> None:
        super().on_forward_pre(module, args)
        self.calls.append((self.session.step, type(module).__name__, _global_hooks() > 0, self.session.sampled))


def _rollout(model: nn.Module, n: int) -> list[torch.Tensor]:
    with torch.no_grad():
        return [model(torch.randn(1, 4)) for _ in range(n)]


@pytest.mark.parametrize("grad_off", ["no_grad", "inference_mode", "set_grad_enabled"])
def test_grad_disabled_outermost_calls_run_without_the_global_hooks_on_a_sampled_step(grad_off):
    torch.manual_seed(0)
    model, critic = Net(), nn.Linear(4, 1)  # a model class of the script's and a torch one, both top level
    opt = torch.optim.SGD([*model.parameters(), *critic.parameters()], lr=0.01)
    before = _global_hooks()
    context = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode,
               "set_grad_enabled": lambda: torch.set_grad_enabled(False)}[grad_off]
    roots, inner = Seen("roots"), Seen("none")
    with watch([roots, inner], sampler=Sampler(first=1, every=1000, calls=None)) as session:
        assert session.sampled
        model(torch.randn(2, 4))         # first seen with grad on: every call, through the global hooks
        critic(torch.randn(2, 4))
        with context():
            for _ in range(3):           # a rollout before the first step: step 0, a sampled step
                model(torch.randn(1, 4))
                critic(torch.randn(1, 4))
                assert _global_hooks() == before + 2 and session.sampled and session.depth == 0
        _step(model, opt)
    # each outermost call reaches the watchers asking for outermost calls, hooks off, as an unsampled call's
    assert [c for c in roots.calls if not c[2]] == [(0, "Net", False, False), (0, "Linear", False, False)] * 3
    assert all(c[3] for c in roots.calls if c[2])
    # a watcher asking for no unsampled calls sees none of them, and nothing inside them
    assert [c[1] for c in inner.calls] == ["Net", "Sequential", "Linear", "ReLU", "Dropout", "Linear", "Linear",
                                          "Net", "Sequential", "Linear", "ReLU", "Dropout", "Linear"]
    assert _global_hooks() == before and "__call__" not in Net.__dict__ and "__call__" not in nn.Linear.__dict__


def test_a_grad_disabled_call_that_raises_puts_the_hooks_back():
    torch.manual_seed(0)
    model = Exploding()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    before = _global_hooks()
    rec = Seen("roots")
    with watch([rec], sampler=Sampler(first=1, every=1000, calls=None)) as session:
        model(torch.randn(2, 4))
        with torch.no_grad(), pytest.raises(ValueError, match="bad batch"):
            model(torch.randn(1, 4))
        assert _global_hooks() == before + 2 and session.depth == 0 and session.sampled
        _step(model, opt)
    assert [c[2:] for c in rec.calls if c[1] == "Exploding"][:2] == [(True, True), (False, False)]
    assert _global_hooks() == before


def test_a_grad_disabled_call_stays_on_the_global_hooks_beside_another_global_hook():
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    seen: list[str] = []
    other = module_hooks.register_module_forward_hook(lambda m, a, o: seen.append(type(m).__name__))
    try:
        rec = Seen("none")
        with watch([rec], sampler=Sampler(first=1, every=1000, calls=None)):
            model(torch.randn(2, 4))
            seen.clear()
            _rollout(model, 1)
            _step(model, opt)
    finally:
        other.remove()
    assert seen[:6] == ["Linear", "ReLU", "Dropout", "Linear", "Sequential", "Net"]  # the user's hook: every call
    assert [c[1] for c in rec.calls[6:12]] == ["Net", "Sequential", "Linear", "ReLU", "Dropout", "Linear"]


def test_no_watcher_asking_for_unsampled_calls_means_no_hook_at_all():
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    before = _global_hooks()
    nothing = Recorder("none")
    with watch([nothing], sampler=ONLY_STEP_0):
        _step(model, opt)
        assert _global_hooks() == before and "__call__" not in Net.__dict__
        _step(model, opt)
    assert [s for s, _ in nothing.pre] == [0] * 6


def test_a_model_whose_class_is_patched_copies_pickles_scripts_and_compiles_unchanged():
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(3, 4)
    with watch([Recorder("roots")], sampler=ONLY_STEP_0):
        _step(model, opt)
        assert "__call__" in Net.__dict__
        model.eval()
        expected = model(x)
        ema = copy.deepcopy(model)
        assert torch.equal(ema(x), expected) and not ema._forward_pre_hooks
        restored = pickle.loads(pickle.dumps(model))
        assert torch.equal(restored(x), expected)
        buffer = io.BytesIO()
        torch.save(model, buffer)
        buffer.seek(0)
        assert torch.equal(torch.load(buffer, weights_only=False)(x), expected)
        scripted = torch.jit.script(model)
        assert torch.equal(scripted(x), expected)
        compiled = torch.compile(model, backend="eager")  # dynamo must never trace the class's __call__
        assert torch.equal(compiled(x), expected)
        assert "__call__" not in Net.__dict__ and _global_hooks() >= 2
        _step(model, opt)
    assert "__call__" not in Net.__dict__


class Exploding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        if x.shape[0] == 1:
            raise ValueError("bad batch")
        return self.fc(x)


def test_a_forward_that_raises_on_an_unsampled_step_leaves_the_stack_empty():
    torch.manual_seed(0)
    model = Exploding()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rec = Recorder("roots")
    with watch([rec], sampler=ONLY_STEP_0) as session:
        _step(model, opt)
        with pytest.raises(ValueError, match="bad batch"):
            model(torch.randn(1, 4))
        assert session.depth == 0
        _step(model, opt)
    assert [d for s, d in rec.pre if s == 1] == [1, 1]
    assert "__call__" not in Exploding.__dict__


def test_validation_in_train_mode_and_training_in_eval_mode_are_found_on_unsampled_steps():
    def train():
        torch.manual_seed(0)
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(12):
            _step(model, opt)
            if step == 5:  # validation that forgot model.eval(): steps 1+ are never sampled
                with torch.no_grad():
                    for _ in range(3):
                        model(torch.randn(6, 4))
            if step == 8:
                model.eval()  # ... and a model.eval() never undone: steps 9-11 train in eval mode

    with watch(["mode"], sampler=ONLY_STEP_0) as session:
        train()
    assert sorted(codes(session.findings)) == ["TP402", "TP453"]


class DropoutBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return F.dropout(self.fc(x), 0.3)  # training= left at its default: dropout also in eval


def test_functional_dropout_in_eval_is_named_by_its_module_on_unsampled_steps():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), DropoutBlock(), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with watch(["functional_dropout", "mode"], sampler=ONLY_STEP_0) as session:
        for _ in range(3):
            _step(model, opt)
        model.eval()
        with torch.no_grad():
            model(torch.randn(6, 4))
    (f,) = [f for f in session.findings if f.code == "TP458"]
    assert f.subject == "1"
