"""Runtime TP457: a train() override that freezes stages never ran before training."""

from __future__ import annotations

import torch
import torch.nn as nn

from tests.watch.util import codes, watched


class Backbone(nn.Module):
    """mmpretrain-style: `frozen_stages` is applied in train(), not in __init__."""

    def __init__(self, frozen_stages=1):
        super().__init__()
        self.frozen_stages = frozen_stages
        self.stages = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
        self.head = nn.Linear(8, 3)

    def _freeze_stages(self):
        for stage in self.stages[: self.frozen_stages]:
            stage.eval()
            for p in stage.parameters():
                p.requires_grad = False

    def train(self, mode=True):
        super().train(mode)
        self._freeze_stages()
        return self

    def forward(self, x):
        for stage in self.stages:
            x = torch.relu(stage(x))
        return self.head(x)


class FrozenInInit(Backbone):
    def __init__(self):
        super().__init__()
        self._freeze_stages()


def _train(model, call_train: bool, steps=4):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if call_train:
        model.train()
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(torch.randn(8, 8)), torch.randint(0, 3, (8,))).backward()
        opt.step()


def test_frozen_stages_never_frozen_because_train_never_ran():
    torch.manual_seed(0)
    model = Backbone()
    frozen_before = model.stages[0].weight.clone()
    findings = watched(lambda: _train(model, call_train=False), ["train_override"])
    assert not torch.equal(frozen_before, model.stages[0].weight)  # the consequence: the "frozen" stage trained
    [f] = [f for f in findings if f.code == "TP457"]
    assert "`Backbone`" in f.message and "test_train_override.py:" in f.message and "model.train()" in f.fix


def test_train_called_or_setup_in_init_is_silent():
    torch.manual_seed(0)
    model = Backbone()
    frozen_before = model.stages[0].weight.clone()
    assert codes(watched(lambda: _train(model, call_train=True), ["train_override"])) == []
    assert torch.equal(frozen_before, model.stages[0].weight)
    assert codes(watched(lambda: _train(FrozenInInit(), call_train=False), ["train_override"])) == []
    wrapped = nn.Sequential(Backbone(), nn.ReLU())  # a parent's train() reaches the override
    assert codes(watched(lambda: _train(wrapped, call_train=True), ["train_override"])) == []
    plain = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1), nn.Linear(8, 3))
    assert codes(watched(lambda: _train(plain, call_train=False), ["train_override"])) == []


# ---------------------------------------------------------------------------------------- variants
# Written before the watcher was tuned for them (issue 31). The contract: a class overrides train(mode) and
# the override — directly or through the methods and functions it calls, `self.apply(fn)` included — puts
# sub-modules in eval mode or changes requires_grad; when train() never ran on the module before the first
# optimizer step that trains it, that set-up is not in effect.
import pytest  # noqa: E402


def set_bn_eval(m):
    if isinstance(m, nn.BatchNorm1d):
        m.eval()


def freeze_bn_params(m):
    if isinstance(m, nn.BatchNorm1d):
        for p in m.parameters():
            p.requires_grad_(False)


class BNNet(nn.Module):
    """A small net with BatchNorm, whose train() override freezes it in one of several forms."""

    form = "apply"

    def __init__(self, setup_in_init=False):
        super().__init__()
        self.stem = nn.Linear(8, 8)
        self.bn = nn.BatchNorm1d(8)
        self.head = nn.Linear(8, 3)
        if setup_in_init:  # a set-up under an `if` may not run: only an unconditional one counts
            self.freeze()

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.stem(x))))

    def freeze(self):
        pass


class ApplyFunction(BNNet):
    def train(self, mode=True):
        super().train(mode)
        if mode:
            self.apply(set_bn_eval)
        return self

    def freeze(self):
        self.apply(set_bn_eval)


class ApplyLambda(BNNet):
    def train(self, mode=True):
        super().train(mode)
        self.apply(lambda m: m.train(False) if isinstance(m, nn.BatchNorm1d) else None)
        return self

    def freeze(self):
        self.apply(lambda m: m.train(False) if isinstance(m, nn.BatchNorm1d) else None)


class ModulesLoop(BNNet):
    def train(self, mode=True):
        super().train(mode)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.eval()
        return self

    def freeze(self):
        for m in self.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.eval()


class RequiresGradApply(BNNet):
    def train(self, mode=True):
        result = super().train(mode)
        self.apply(freeze_bn_params)
        return result

    def freeze(self):
        self.apply(freeze_bn_params)


class TwoLevels(BNNet):
    """train() -> self._lock() -> self._lock_norms() -> m.eval(): the set-up is two calls away."""

    def train(self, mode=True):
        super().train(mode)
        self._lock()
        return self

    def _lock(self):
        self._lock_norms()

    def _lock_norms(self):
        for module in self.children():
            if isinstance(module, nn.BatchNorm1d):
                module.eval()

    def freeze(self):
        self._lock()


def _init_then_freeze(self):
    super(type(self), self).__init__()
    self.freeze()


FREEZING = [ApplyFunction, ApplyLambda, ModulesLoop, RequiresGradApply, TwoLevels]


class Logging(BNNet):
    """An override that changes no training state: nothing to miss."""

    def train(self, mode=True):
        self.mode_changes = getattr(self, "mode_changes", 0) + 1
        return super().train(mode)


def _bn_moves(model):
    """Whether training moves the BatchNorm's running statistics, and its weight."""
    before = (model.bn.running_mean.clone(), model.bn.weight.detach().clone())
    _train(model, call_train=False, steps=3)
    return not torch.equal(before[0], model.bn.running_mean), not torch.equal(before[1], model.bn.weight)


@pytest.mark.parametrize("cls", FREEZING, ids=lambda c: c.__name__)
def test_train_override_freezing_batchnorm_that_never_ran(cls):
    torch.manual_seed(0)
    model = cls()
    found = watched(lambda: _train(model, call_train=False), ["train_override"])
    [f] = [f for f in found if f.code == "TP457"]
    assert f"({cls.__name__})" in f.message and f.path.endswith("test_train_override.py")
    torch.manual_seed(0)
    assert _bn_moves(cls()) == (True, True)  # the consequence: the BatchNorm meant to stay frozen trains


@pytest.mark.parametrize("cls", FREEZING, ids=lambda c: c.__name__)
def test_the_same_override_is_silent_once_train_ran_or_init_did_the_setup(cls):
    torch.manual_seed(0)
    model = cls()
    assert watched(lambda: _train(model, call_train=True), ["train_override"]) == []
    set_up_in_init = type(f"{cls.__name__}Init", (cls,), {"__init__": _init_then_freeze})
    assert watched(lambda: _train(set_up_in_init(), call_train=False), ["train_override"]) == []
    ran = cls()
    ran.train()
    assert _bn_moves(ran) != (True, True)  # set up: its statistics (eval) or its weight (requires_grad) stay


def test_an_override_that_changes_no_training_state_is_silent():
    torch.manual_seed(0)
    assert watched(lambda: _train(Logging(), call_train=False), ["train_override"]) == []


class Staged(nn.Module):
    """mmpretrain-shaped: the override's set-up is switched on and off by the module's configuration."""

    def __init__(self, frozen_stages=-1, norm_eval=False):
        super().__init__()
        self.frozen_stages, self.norm_eval = frozen_stages, norm_eval
        self.stem = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))
        self.stages = nn.ModuleList([nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8)) for _ in range(2)])
        self.head = nn.Linear(8, 3)

    def _freeze_stages(self):
        if self.frozen_stages >= 0:
            self.stem.eval()
            for p in self.stem.parameters():
                p.requires_grad = False
        for i in range(1, self.frozen_stages + 1):
            m = self.stages[i - 1]
            m.eval()
            for p in m.parameters():
                p.requires_grad = False

    def train(self, mode=True):
        super().train(mode)
        self._freeze_stages()
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, nn.BatchNorm1d):
                    m.eval()
        return self

    def forward(self, x):
        x = self.stem(x)
        for stage in self.stages:
            x = torch.relu(stage(x))
        return self.head(x)


@pytest.mark.parametrize("config", [{"frozen_stages": 0}, {"frozen_stages": 2}, {"norm_eval": True}])
def test_a_configured_set_up_that_never_ran_is_reported(config):
    torch.manual_seed(0)
    found = watched(lambda: _train(Staged(**config), call_train=False), ["train_override"])
    assert [f.code for f in found] == ["TP457"]


def test_a_set_up_switched_off_by_the_configuration_or_already_made_is_silent():
    torch.manual_seed(0)
    assert watched(lambda: _train(Staged(), call_train=False), ["train_override"]) == []  # mmpretrain's defaults
    for cls in FREEZING:  # done in __init__ under an `if`: in effect all the same
        assert watched(lambda cls=cls: _train(cls(setup_in_init=True), call_train=False),
                       ["train_override"]) == [], cls


def test_a_freeze_done_by_the_script_itself_counts_as_in_effect():
    torch.manual_seed(0)
    model = RequiresGradApply()
    for p in model.bn.parameters():
        p.requires_grad_(False)
    assert watched(lambda: _train(model, call_train=False), ["train_override"]) == []


def test_after_the_first_step_train_is_torchs_own_again():
    # only train() calls before the first optimizer step matter: a script that switches modes at every step pays
    # nothing for them afterwards
    from torchpact.watch import watch

    original = nn.Module.train
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with watch(["train_override"]):
        assert nn.Module.train is not original
        for _ in range(3):
            model.train()
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
            assert nn.Module.train is original
            model.eval()
    assert nn.Module.train is original
